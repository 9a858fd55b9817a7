"""``memory-studio mcp``: our memory for any MCP client (desktop assistants, IDEs), over stdio or HTTP.

- ``tools``: ``MemoryTools``, what each tool and resource does over ``Memory``, bound to one resource
  (or any, with a token), every call traced like an agent turn;
- ``server``: the official MCP Python SDK's ``MCPServer`` with those tools and the thread transcripts as
  resources; stdio, or streamable HTTP behind the gateway's ``RequestGuard``;
- ``cli``: the ``mcp`` subcommand.

The SDK comes with the ``mcp`` extra (``pip install 'memory-studio[mcp]'``).
"""
