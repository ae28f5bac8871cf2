"""``ai-memory inbox``: read an agent's notifications.

Unread only unless ``--all``; ``--mark-read`` asks the daemon to mark what
it returned as read in the same request. Each notification prints as a
header line (read state, priority, tier, sender, time, id), its title, and
its payload indented beneath.
"""

from __future__ import annotations

from typing import Any

import click

from cli.output import indent, note, print_json
from cli.state import CliState, pass_state
from common import limits


def render_message(message: dict[str, Any]) -> str:
    state = "read" if message.get("read") else "unread"
    header = (
        f"[{state}] p{message.get('priority', '-')} {message.get('tier', '-')}"
        f"  from {message.get('from', '?')}"
        f"  at {message.get('received_at') or message.get('created_at') or '?'}"
        f"  id {message.get('id', '?')}"
    )
    title = message.get("title") or message.get("subject") or ""
    payload = message.get("payload") if message.get("payload") is not None else message.get("body")
    lines = [header, f"  {title}"]
    if payload:
        lines.append(indent(str(payload)))
    return "\n".join(lines)


@click.command()
@click.option("--agent-id", "agent_id", help="Whose inbox (default: the global --agent-id).")
@click.option("--all", "show_all", is_flag=True, help="Include notifications already read.")
@click.option(
    "--limit",
    type=click.IntRange(1, limits.inbox_limit_max),
    help=f"At most this many (default {limits.inbox_limit_default}).",
)
@click.option(
    "--min-priority",
    type=click.IntRange(limits.notify_priority_min, limits.notify_priority_max),
    help="Skip notifications below this priority.",
)
@click.option("--mark-read", is_flag=True, help="Mark the returned notifications as read.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def inbox(
    state: CliState,
    agent_id: str | None,
    show_all: bool,
    limit: int | None,
    min_priority: int | None,
    mark_read: bool,
    as_json: bool,
) -> None:
    """Show an agent's notifications."""
    who = agent_id or state.agent_id
    if not who:
        raise click.UsageError("whose inbox? pass --agent-id or set AI_MEMORY_AGENT_ID")
    reply = state.client(agent_id=who).get(
        "/api/v1/inbox",
        agent_id=who,
        unread_only=not show_all,
        limit=limit,
        min_priority=min_priority,
        mark_read=True if mark_read else None,
    )
    if as_json:
        print_json(reply)
        return
    messages = reply.get("messages", [])
    kind = "notification" if len(messages) == 1 else "notifications"
    done = ", now marked read" if mark_read and messages else ""
    note(f"{len(messages)} {kind} for {reply.get('agent_id', who)}{done}")
    for message in messages:
        click.echo(render_message(message))
