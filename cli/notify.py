"""``ai-memory notify``: push one notification into another agent's inbox.

Every send carries an ``Idempotency-Key`` (``--idempotency-key``, else a
fresh one). If the daemon cannot be reached mid-request or answers 503
(quorum not met, overloaded) the command waits the daemon's ``Retry-After``
(capped) and sends once more with the same key, so the retry can never
create a second notification; if that fails too, the error names the key to
retry with by hand. ``--agent-id`` names the sender, like ``inbox --agent-id``
names the reader (default: the global ``--agent-id``).

``--reply-to ID`` answers notification ID: it goes to that notification's
sender, in its thread, so TARGET may be left out (``notify --reply-to ID
PAYLOAD``). ``--in-reply-to ID`` only threads it under ID.
"""

from __future__ import annotations

import click

from cli.body import read_body
from cli.client import create_idempotently, drop_none
from cli.output import print_json
from cli.state import CliState, pass_state
from common import limits


@click.command()
@click.argument("target", required=False)
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
@click.option("--reply-to", help="Answer this notification: to its sender, in its thread.")
@click.option("--in-reply-to", help="Thread it under this notification (you received or sent).")
@click.option(
    "--idempotency-key", help="Reuse the key of an earlier attempt so a retry is written once."
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def notify(
    state: CliState,
    target: str | None,
    payload: str | None,
    title: str,
    priority: int | None,
    tier: str | None,
    agent_id: str | None,
    reply_to: str | None,
    in_reply_to: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Send PAYLOAD (or stdin) to agent TARGET's inbox (with --reply-to, TARGET may be left out)."""
    if target is None and reply_to is None:
        raise click.UsageError("name the TARGET agent, or answer a notification with --reply-to")
    if reply_to is not None and payload is None and target is not None:
        payload = target  # `notify --reply-to ID PAYLOAD`
        target = None
    body = drop_none(
        {
            "target_agent_id": target,
            "title": title,
            "payload": read_body(payload, "payload"),
            "priority": priority,
            "tier": tier,
            "reply_to": reply_to,
            "in_reply_to": in_reply_to,
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
    if reply.get("in_reply_to"):
        click.echo(f"  in reply to {reply['in_reply_to']} (thread {reply.get('thread_id')})")
