"""An MCP server on the official Python SDK (`mcp` from PyPI), for the interoperability tests.

Usage: python_sdk.py stdio | python_sdk.py http PORT
"""

import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import Icon, ToolAnnotations
from pydantic import BaseModel

server = MCPServer(
    name="ctxsync-interop",
    title="ctxsync interop server",
    description="A server on the official Python SDK",
    instructions="Call lookup with a key.",
    version="1.0.0",
)


class Entry(BaseModel):
    key: str
    value: str


@server.tool(
    title="Look up a key",
    annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
    icons=[Icon(src="data:image/png;base64,iVBORw0KGgo=", mimeType="image/png", sizes=["16x16"])],
    meta={"ui": {"resourceUri": "ui://interop/lookup"}},
)
def lookup(key: str) -> Entry:
    """Returns the value stored under a key."""
    return Entry(key=key, value=key.upper())


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


if __name__ == "__main__":
    if sys.argv[1:] == ["stdio"]:
        server.run("stdio")
    elif len(sys.argv) == 3 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        sys.exit(__doc__)
