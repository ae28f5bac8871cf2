"""``ai-memory inbox``: read an agent's notifications.

Unread only unless ``--all``; ``--mark-read`` asks the daemon to mark what
it returned as read in the same request. ``--since`` (RFC 3339) and
``--tier`` filter like the API's ``since`` and ``tier``. ``--wait`` blocks on
the inbox's push stream until a notification that passes the filters
arrives (one already there is shown at once); ``--timeout S`` bounds the
wait (exit 8). Each notification prints as a
header line (read state, priority, tier, sender, time, id), its title, and
its payload indented beneath.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from cli.client import ApiClient
from cli.output import indent, note, print_json
from cli.state import CliState, pass_state
from cli.stream import Event, wait
from common import limits
from common.errors import BadRequest


def render_message(message: dict[str, Any]) -> str:
    state = "read" if message.get("read") else "unread"
    header = (
        f"[{state}] p{message.get('priority', '-')} {message.get('tier', '-')}"
        f"  from {message.get('from', '?')}"
        f"  at {message.get('received_at') or message.get('created_at') or '?'}"
        f"  id {message.get('id', '?')}"
    )
    if message.get("in_reply_to"):
        header += f"  in reply to {message['in_reply_to']} (thread {message.get('thread_id')})"
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
@click.option(
    "--since",
    help="Only notifications created after this time (RFC 3339, e.g. 2026-05-01T12:00:00Z).",
)
@click.option("--tier", type=click.Choice(["short", "mid", "long"]), help="Only this tier.")
@click.option("--thread", "thread_id", help="Only this thread (a notification's thread_id).")
@click.option("--mark-read", is_flag=True, help="Mark the returned notifications as read.")
@click.option(
    "--wait", is_flag=True, help="If there is nothing to show, block until a notification arrives."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    help="With --wait: give up after this many seconds (exit 8).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def inbox(
    state: CliState,
    agent_id: str | None,
    show_all: bool,
    limit: int | None,
    min_priority: int | None,
    since: str | None,
    tier: str | None,
    thread_id: str | None,
    mark_read: bool,
    wait: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Show an agent's notifications."""
    who = agent_id or state.agent_id
    if timeout is not None and not wait:
        raise click.UsageError("--timeout goes with --wait")
    if not who and (state.key or state.api_key):
        # A key bound to an agent names it: the node says which.
        bound = state.client().get("/api/v1/whoami").get("agent")
        who = str(bound) if bound else None
    if not who:
        raise click.UsageError("whose inbox? pass --agent-id or set AI_MEMORY_AGENT_ID "
                               "(or use a key bound to an agent)")
    client = state.client(agent_id=who)

    def read() -> dict[str, Any]:
        reply: dict[str, Any] = client.get(
            "/api/v1/inbox",
            agent_id=who,
            unread_only=not show_all,
            limit=limit,
            min_priority=min_priority,
            since=since,
            tier=tier,
            thread_id=thread_id,
            mark_read=True if mark_read else None,
        )
        return reply

    if not wait:
        reply = read()
    else:
        reply = wait_for_notification(client, who, read, timeout=timeout, mark_read=mark_read,
                                      min_priority=min_priority, tier=tier, since=since)
    if as_json:
        print_json(reply)
        return
    messages = reply.get("messages", [])
    kind = "notification" if len(messages) == 1 else "notifications"
    done = ", now marked read" if mark_read and messages else ""
    note(f"{len(messages)} {kind} for {reply.get('agent_id', who)}{done}")
    for message in messages:
        click.echo(render_message(message))



def _time(value: str, what: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(f"{what} {value!r} is not an RFC 3339 time "
                         "(e.g. 2026-05-01T12:00:00Z)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _passes(n: dict[str, Any], min_priority: int | None, tier: str | None,
            since: datetime | None) -> bool:
    if min_priority is not None and int(n.get("priority") or 0) < min_priority:
        return False
    if tier is not None and n.get("tier") != tier:
        return False
    created = n.get("created_at")
    return since is None or not isinstance(created, str) or _time(created, "created_at") > since


def wait_for_notification(client: ApiClient, who: str, read: Callable[[], dict[str, Any]], *,
                          timeout: float | None, mark_read: bool, min_priority: int | None,
                          tier: str | None, since: str | None) -> dict[str, Any]:
    """What ``inbox`` shows, as soon as there is something to show."""
    since_at = _time(since, "--since") if since else None

    def check() -> dict[str, Any] | None:
        reply = read()
        return reply if reply.get("messages") else None

    def on_event(ev: Event) -> dict[str, Any] | None:
        n = ev.data.get("notification") if isinstance(ev.data, dict) else None
        if not isinstance(n, dict) or not _passes(n, min_priority, tier, since_at):
            return None
        if mark_read:
            client.post("/api/v1/inbox/read", {"ids": [n["id"]], "agent_id": who})
            n = {**n, "read": True}
        return {"agent_id": who, "namespace": n.get("namespace"), "count": 1,
                "unread_only": True, "messages": [n]}

    return wait(client, "/api/v1/inbox/stream", {"agent_id": who}, timeout=timeout,
                check=check, on_event=on_event, what=f"arrived for {who}", note=note)
