"""``ai-memory health``: is the daemon at ``--url`` up, and which node is it."""

from __future__ import annotations

import click

from cli.output import print_json
from cli.state import CliState, pass_state


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def health(state: CliState, as_json: bool) -> None:
    """Ask the daemon for its health."""
    reply = state.client().get("/api/v1/health")
    if as_json:
        print_json(reply)
        return
    federation = "federated" if reply.get("federation_enabled") else "single node"
    click.echo(
        f"{reply.get('status', '?')}: {reply.get('service', 'ai-memory')} {reply.get('version', '?')}"
        f" node {reply.get('node_id', '?')} ({federation}) at {state.url}"
    )
