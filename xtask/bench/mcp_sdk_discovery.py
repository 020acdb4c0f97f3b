"""Reference for bench_discovery: the official Python MCP SDK discovering stdio servers.

Usage: python mcp_sdk_discovery.py SERVERS.json
SERVERS.json is a list of {"command": str, "args": [str]}. Every server is started,
initialized and asked for its tools concurrently; the script prints one JSON object:
{"elapsed_s": seconds from start until the last tool list arrived, "servers": n, "tools": total}.
Shutting the servers down afterwards is not timed (bench_discovery does not time it either).
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def discover(server: dict, started: float) -> tuple[float, int]:
    params = StdioServerParameters(command=server["command"], args=server["args"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            return time.perf_counter() - started, len(tools.tools)


async def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as file:
        servers = json.load(file)
    started = time.perf_counter()
    results = await asyncio.gather(*(discover(server, started) for server in servers))
    print(
        json.dumps(
            {
                "elapsed_s": max(elapsed for elapsed, _ in results),
                "servers": len(results),
                "tools": sum(count for _, count in results),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
