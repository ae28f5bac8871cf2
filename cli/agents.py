"""``ai-memory agents list|register``: the agents a cluster knows about."""

from __future__ import annotations

import click

from cli.output import print_json, table
from cli.state import CliState, pass_state


@click.group()
def agents() -> None:
    """List and register agents."""


@agents.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def list_agents(state: CliState, as_json: bool) -> None:
    """Show every registered agent."""
    reply = state.client().get("/api/v1/agents")
    if as_json:
        print_json(reply)
        return
    click.echo(
        table(
            reply.get("agents", []),
            [
                ("agent_id", "AGENT"),
                ("agent_type", "TYPE"),
                ("capabilities", "CAPABILITIES"),
                ("registered_at", "REGISTERED"),
                ("last_seen_at", "LAST SEEN"),
            ],
        )
    )


@agents.command("register")
@click.argument("agent_id")
@click.option(
    "--type", "agent_type", required=True, help="Kind of agent, e.g. claude-code, codex, human."
)
@click.option(
    "--capability", "capabilities", multiple=True, help="Something the agent can do (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def register(
    state: CliState, agent_id: str, agent_type: str, capabilities: tuple[str, ...], as_json: bool
) -> None:
    """Register AGENT_ID (or update its type and capabilities)."""
    reply = state.client(agent_id=agent_id).post(
        "/api/v1/agents",
        {"agent_id": agent_id, "agent_type": agent_type, "capabilities": list(capabilities)},
    )
    if as_json:
        print_json(reply)
        return
    click.echo(
        f"registered {reply.get('agent_id', agent_id)} ({reply.get('agent_type', agent_type)})"
    )
