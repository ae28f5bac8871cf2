"""What one ``ai-memory mcp`` process is configured with.

An MCP server process serves exactly one agent (the MCP client that spawned
it) and talks to exactly one node. Everything it needs is fixed at start, so
it lives in one frozen object that ``cli/mcp_cmd.py`` builds from flags and
environment and hands to :func:`daemon.mcp.server.build_server`; nothing
below reads the environment.

``workspace`` / ``project`` are the project a static MCP client speaks for:
the default mailbox of list/pop/cancel/briefing and the default sender of
send. A tool call that names its own scope wins. Leaving both unset lets the
node resolve the scope from ``session_id`` or refuse a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import limits


@dataclass(frozen=True, slots=True)
class McpSettings:
    url: str  # base URL of the node, e.g. http://127.0.0.1:9077
    agent_id: str | None = None  # sent as X-Agent-Id
    api_key: str | None = None  # sent as X-API-Key
    key: str | None = None  # sent as Authorization: Bearer (a node in keys mode needs one)
    session_id: str | None = None  # sent as x-memory-actor-session-id
    workspace: str | None = None
    project: str | None = None
    timeout_secs: float = limits.mcp_http_timeout_secs
    retry_wait_max_secs: float = limits.mcp_retry_wait_max_secs

    def __post_init__(self) -> None:
        if bool(self.workspace) != bool(self.project):
            raise ValueError("workspace and project must be given together")
        if self.timeout_secs <= 0:
            raise ValueError("timeout_secs must be positive")
