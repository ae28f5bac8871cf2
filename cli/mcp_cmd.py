"""``ai-memory mcp``: run the MCP server on stdio for one agent, forwarding to one node.

An MCP client config starts it, for example::

    {"mcpServers": {"ai-memory": {"command": "ai-memory",
        "args": ["mcp", "--url", "http://127.0.0.1:9077", "--agent-id", "alice"]}}}

The node address and identity come from this command's flags, else the root
group's ``--url`` / ``--agent-id`` / ``--api-key``, else the environment
(``AI_MEMORY_URL``, ``AI_MEMORY_AGENT_ID``, ``AI_MEMORY_API_KEY``,
``AI_MEMORY_SESSION_ID``). A node in keys mode needs a key: ``--key`` or
``AI_MEMORY_KEY``, sent as ``Authorization: Bearer`` on every call. The project it speaks for is resolved as for
every other command (:mod:`cli.scope`: flags, ``AI_MEMORY_WORKSPACE`` /
``AI_MEMORY_PROJECT``, then ``.ai-memory.toml`` from the working directory
up); with none, mail tools must name their project or the node refuses.

stdout belongs to the MCP protocol: this command prints nothing there, and
usage errors go to stderr before the server starts.
"""

from __future__ import annotations

import click

from cli.client import DEFAULT_URL
from cli.scope import resolve_scope
from cli.state import CliState, pass_state
from common.errors import BadRequest


@click.command("mcp")
@click.option(
    "--url",
    envvar="AI_MEMORY_URL",
    default=None,
    help=f"Node to forward to (default {DEFAULT_URL}).",
)
@click.option(
    "--agent-id",
    envvar="AI_MEMORY_AGENT_ID",
    default=None,
    help="This agent's id, sent as X-Agent-Id.",
)
@click.option("--api-key", envvar="AI_MEMORY_API_KEY", default=None, help="Sent as X-API-Key.")
@click.option(
    "--key",
    envvar="AI_MEMORY_KEY",
    default=None,
    help="This agent's key, sent as Authorization: Bearer (needed by a node in keys mode).",
)
@click.option(
    "--session-id",
    envvar="AI_MEMORY_SESSION_ID",
    default=None,
    help="The hook session this server acts for (x-memory-actor-session-id).",
)
@click.option("--workspace", default=None, help="Workspace of the project this agent works in.")
@click.option("--project", default=None, help="Project this agent works in.")
@pass_state
def mcp(
    state: CliState,
    url: str | None,
    agent_id: str | None,
    api_key: str | None,
    key: str | None,
    session_id: str | None,
    workspace: str | None,
    project: str | None,
) -> None:
    """Serve MCP tools on stdin/stdout, forwarding each call to an ai-memory node."""
    from daemon.mcp.server import run_stdio
    from daemon.mcp.settings import McpSettings

    try:
        scope = resolve_scope(workspace, project)
    except BadRequest as exc:
        raise click.UsageError(exc.message) from exc
    settings = McpSettings(
        url=url or state.url or DEFAULT_URL,
        agent_id=agent_id or state.agent_id,
        api_key=api_key or state.api_key,
        key=key or getattr(state, "key", None),
        session_id=session_id,
        workspace=scope.workspace if scope else None,
        project=scope.project if scope else None,
    )
    run_stdio(settings)
