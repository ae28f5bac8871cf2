"""``ai-memory mcp``: an MCP server (stdio) that forwards every tool to a node's HTTP API.

An MCP client (an agent's harness) spawns ``ai-memory mcp --url ...`` and
talks JSON-RPC on its stdin/stdout. Each tool call becomes one request to
the node's public ``/api/v1`` endpoints, the same service layer HTTP clients
and the CLI use, so the MCP path has no rules of its own and works against
any member of the cluster.

Modules: :mod:`.settings` (what one process is configured with),
:mod:`.node_client` (async HTTP to the node, errors decoded into
:mod:`common.errors`), :mod:`.tools` (the tools, their descriptions and
argument schemas), :mod:`.server` (registration, the MCP error boundary,
stdio). ``docs/mcp.md`` is the user-facing page.
"""
