"""``ai-memory mcp``: run the MCP server on stdio for one agent, forwarding to one node.

An MCP client config starts it, for example::

    {"mcpServers": {"ai-memory": {"command": "ai-memory",
        "args": ["mcp", "--url", "http://127.0.0.1:9077", "--agent-id", "alice"]}}}

The node address and identity come from this command's flags, else the root
group's ``--url`` / ``--agent-id`` / ``--api-key``, else the environment
(``AI_MEMORY_URL``, ``AI_MEMORY_AGENT_ID``, ``AI_MEMORY_API_KEY``,
``AI_MEMORY_SESSION_ID``); an https node is verified against ``--ca-cert``
(``AI_MEMORY_CA_CERT``, the cluster CA). A node in keys mode needs a key: ``--key`` or
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
@click.option("--ca-cert", envvar="AI_MEMORY_CA_CERT", default=None,
              help="The cluster CA (PEM) an https node's certificate is verified against.")
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
    ca_cert: str | None,
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
        ca_cert=ca_cert or state.ca_cert,
    )
    run_stdio(settings)


def _split_urls(values: tuple[str, ...]) -> tuple[str, ...]:
    urls = [u.strip() for v in values for u in v.split(",") if u.strip()]
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise click.UsageError(f"--url {u!r}: give a node's base URL, like {DEFAULT_URL}")
    return tuple(dict.fromkeys(urls))


@click.command("mcp-bridge")
@click.option("--url", "urls", multiple=True,
              help="A node's base URL; repeat (or separate with commas) to fail over in order. "
                   f"Default: AI_MEMORY_URL, else {DEFAULT_URL}.")
@click.option("--agent-id", envvar="AI_MEMORY_AGENT_ID", default=None,
              help="This agent's id, sent as X-Agent-Id.")
@click.option("--api-key", envvar="AI_MEMORY_API_KEY", default=None, help="Sent as X-API-Key.")
@click.option("--session-id", default=None,
              help="The harness session (x-memory-actor-session-id); default: the session "
                   "variable the harness exports (CLAUDE_CODE_SESSION_ID, CODEX_THREAD_ID, ...).")
@click.option("--harness", default=None,
              help="Harness name for the inbox notice (default: from the session variable).")
@click.option("--ca-cert", envvar="AI_MEMORY_CA_CERT", default=None,
              help="The cluster CA (PEM) an https node's certificate is verified against.")
@click.option("--workspace", default=None, help="Workspace of the project (static clients).")
@click.option("--project", default=None, help="Project this agent works in (static clients).")
@click.option("--channel", type=click.Choice(["inbox"]), default=None,
              help="inbox: act as a Claude Code channel, pushing the count-only inbox notice.")
@click.option("--poll-fast-secs", type=float, envvar="AI_MEMORY_BRIDGE_POLL_FAST_SECS",
              default=None, help="Notice poll after a change (default 5).")
@click.option("--poll-slow-secs", type=float, envvar="AI_MEMORY_BRIDGE_POLL_SLOW_SECS",
              default=None, help="Longest wait between notice polls (default 60).")
@pass_state
def mcp_bridge(
    state: CliState,
    urls: tuple[str, ...],
    agent_id: str | None,
    api_key: str | None,
    session_id: str | None,
    harness: str | None,
    ca_cert: str | None,
    workspace: str | None,
    project: str | None,
    channel: str | None,
    poll_fast_secs: float | None,
    poll_slow_secs: float | None,
) -> None:
    """Serve MCP on stdin/stdout for a harness, relaying to a node's /mcp with its session."""
    import os

    from common import limits
    from daemon.mcp.bridge import BridgeSettings, run_bridge, session_from_env

    env_session, env_harness = session_from_env(os.environ)
    try:
        scope = resolve_scope(workspace, project)
        settings = BridgeSettings(
            urls=_split_urls(urls or (os.environ.get("AI_MEMORY_URL") or state.url or DEFAULT_URL,)),
            agent_id=agent_id or state.agent_id,
            api_key=api_key or state.key or state.api_key,  # the global --key / AI_MEMORY_KEY too
            session_id=session_id or env_session,
            harness=harness or env_harness,
            workspace=scope.workspace if scope else None,
            project=scope.project if scope else None,
            channel=channel == "inbox",
            poll_fast_secs=poll_fast_secs or limits.bridge_poll_fast_secs,
            poll_slow_secs=poll_slow_secs or limits.bridge_poll_slow_secs,
            ca_cert=ca_cert or state.ca_cert,
        )
    except (BadRequest, ValueError) as exc:
        raise click.UsageError(getattr(exc, "message", None) or str(exc)) from exc
    run_bridge(settings)
