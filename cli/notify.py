"""``ai-memory notify``: push one notification into another agent's inbox.

Every send carries an ``Idempotency-Key`` (``--idempotency-key``, else a
fresh one). If the daemon cannot be reached mid-request or answers 503
(quorum not met, overloaded) the command waits the daemon's ``Retry-After``
(capped) and sends once more with the same key, so the retry can never
create a second notification; if that fails too, the error names the key to
retry with by hand. ``--agent-id`` names the sender, like ``inbox --agent-id``
names the reader (default: the global ``--agent-id``).
"""

from __future__ import annotations

import click

from cli.body import read_body
from cli.client import create_idempotently, drop_none
from cli.output import print_json
from cli.state import CliState, pass_state
from common import limits


@click.command()
@click.argument("target")
@click.argument("payload", required=False)
@click.option("--title", required=True, help="One-line subject of the notification.")
@click.option(
    "--priority",
    type=click.IntRange(limits.notify_priority_min, limits.notify_priority_max),
    help=f"{limits.notify_priority_min}..{limits.notify_priority_max}, "
    f"default {limits.notify_priority_default}.",
)
@click.option(
    "--tier", type=click.Choice(["short", "mid", "long"]), help="Lifetime of the notification."
)
@click.option("--agent-id", "agent_id", help="Who sends it (default: the global --agent-id).")
@click.option(
    "--idempotency-key", help="Reuse the key of an earlier attempt so a retry is written once."
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def notify(
    state: CliState,
    target: str,
    payload: str | None,
    title: str,
    priority: int | None,
    tier: str | None,
    agent_id: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Send PAYLOAD (or stdin) to agent TARGET's inbox."""
    body = drop_none(
        {
            "target_agent_id": target,
            "title": title,
            "payload": read_body(payload, "payload"),
            "priority": priority,
            "tier": tier,
        }
    )
    client = state.client(agent_id=agent_id)
    reply = create_idempotently(client, "/api/v1/notify", body, idempotency_key)
    if as_json:
        print_json(reply)
        return
    click.echo(
        f"notified {reply.get('delivered_to') or target}: {reply.get('notification_id') or reply.get('id')}"
    )
