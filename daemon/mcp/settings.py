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

from collections.abc import Mapping
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
    ca_cert: str | None = None  # the cluster CA an https node is verified against (common.trust)
    retry_wait_max_secs: float = limits.mcp_retry_wait_max_secs

    def __post_init__(self) -> None:
        if bool(self.workspace) != bool(self.project):
            raise ValueError("workspace and project must be given together")
        if self.timeout_secs <= 0:
            raise ValueError("timeout_secs must be positive")


# Where a harness puts its session id for the processes it spawns, and which
# harness each one means. First match wins; --session-id beats them all.
SESSION_ENV: tuple[tuple[str, str | None], ...] = (
    ("AI_MEMORY_SESSION_ID", None),
    ("CLAUDE_CODE_SESSION_ID", "claude-code"),
    ("CLAUDE_SESSION_ID", "claude-code"),
    ("CODEX_THREAD_ID", "codex"),
    ("CODEX_SESSION_ID", "codex"),
    ("KIMI_SESSION_ID", "kimi"),
)


def session_from_env(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(session id, harness) from the first session variable set in ``env``."""
    for name, harness in SESSION_ENV:
        value = (env.get(name) or "").strip()
        if value:
            return value, harness
    return None, None
