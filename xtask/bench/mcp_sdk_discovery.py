"""Reference for bench_discovery: the official Python MCP SDK discovering stdio servers.

Usage: python mcp_sdk_discovery.py SERVERS.json
SERVERS.json is a list of {"command": str, "args": [str]}. Every server is started,
initialized and asked for its tools concurrently; the script prints one JSON object:
{"elapsed_s": seconds from start until the last tool list arrived, "servers": n, "tools": total}.
Shutting the servers down is not timed (bench_discovery does not time it either): once the
figure is printed the script exits at once and the servers end on their closed stdin.
"""

import asyncio
import json
import os
import sys
import time

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def discover(server: dict, started: float, results: list, all_listed: asyncio.Event, total: int) -> None:
    params = StdioServerParameters(command=server["command"], args=server["args"])
    with open(os.devnull, "w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                results.append((time.perf_counter() - started, len(tools.tools)))
                if len(results) == total:
                    all_listed.set()
                # Stay connected until the figure is printed.
                await asyncio.Event().wait()


async def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as file:
        servers = json.load(file)
    results: list = []
    all_listed = asyncio.Event()
    started = time.perf_counter()
    tasks = [
        asyncio.create_task(discover(server, started, results, all_listed, len(servers)))
        for server in servers
    ]
    listed = asyncio.create_task(all_listed.wait())
    # A failed connection ends its task early: report it rather than wait forever.
    await asyncio.wait([listed, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        if task.done() and task.exception() is not None:
            raise task.exception()
    print(
        json.dumps(
            {
                "elapsed_s": max(elapsed for elapsed, _ in results),
                "servers": len(results),
                "tools": sum(count for _, count in results),
            }
        ),
        flush=True,
    )
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
