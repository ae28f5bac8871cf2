"""``ai-memory memories store|list|get|delete|promote``: a thin layer over /api/v1/memories.

These are the plain memories whose changes webhooks report; the commands
pass fields straight through and print what the daemon answers.
"""

from __future__ import annotations

import json
from typing import Any

import click

from cli.body import read_body
from cli.client import create_idempotently, drop_none
from cli.output import indent, note, print_json, table
from cli.state import CliState, pass_state
from common import limits

TIERS = ("short", "mid", "long")


@click.group()
def memories() -> None:
    """Store, list, read, promote and delete memories."""


@memories.command("store")
@click.argument("content", required=False)
@click.option("--title", required=True, help="Title of the memory.")
@click.option("--tier", type=click.Choice(TIERS), help="short, mid or long.")
@click.option("--namespace", help="Namespace to store it in.")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--priority", type=click.IntRange(1, 10), help="1..10.")
@click.option("--ttl-secs", type=click.IntRange(min=1), help="Expire after this many seconds.")
@click.option("--metadata", help="A JSON object stored with the memory.")
@click.option(
    "--idempotency-key", help="Reuse the key of an earlier attempt so a retry is written once."
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def store(
    state: CliState,
    content: str | None,
    title: str,
    tier: str | None,
    namespace: str | None,
    tags: tuple[str, ...],
    priority: int | None,
    ttl_secs: int | None,
    metadata: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Store CONTENT (or stdin) as a memory."""
    meta: Any = None
    if metadata is not None:
        try:
            meta = json.loads(metadata)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from exc
        if not isinstance(meta, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--metadata")
    body = drop_none(
        {
            "title": title,
            "content": read_body(content, "content"),
            "tier": tier,
            "namespace": namespace,
            "tags": list(tags) or None,
            "priority": priority,
            "ttl_secs": ttl_secs,
            "metadata": meta,
            "agent_id": state.agent_id,
        }
    )
    reply = create_idempotently(state.client(), "/api/v1/memories", body, idempotency_key)
    if as_json:
        print_json(reply)
        return
    click.echo(
        f"stored {reply.get('id')} ({reply.get('tier', tier or '-')}, {reply.get('namespace', '-')})"
    )


@memories.command("list")
@click.option("--namespace", help="Only this namespace.")
@click.option("--tier", type=click.Choice(TIERS), help="Only this tier.")
@click.option("--tag", "tags", multiple=True, help="Only memories with this tag (repeatable).")
@click.option("--min-priority", type=click.IntRange(1, 10), help="Skip lower priorities.")
@click.option("--agent", "agent_filter", help="Only memories written by this agent.")
@click.option(
    "--limit", type=click.IntRange(1, limits.memory_list_limit_max), help="At most this many."
)
@click.option("--offset", type=click.IntRange(min=0), help="Skip this many first.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def list_memories(
    state: CliState,
    namespace: str | None,
    tier: str | None,
    tags: tuple[str, ...],
    min_priority: int | None,
    agent_filter: str | None,
    limit: int | None,
    offset: int | None,
    as_json: bool,
) -> None:
    """List memories."""
    reply = state.client().get(
        "/api/v1/memories",
        namespace=namespace,
        tier=tier,
        tags=list(tags) or None,
        min_priority=min_priority,
        agent_id=agent_filter,
        limit=limit,
        offset=offset,
    )
    if as_json:
        print_json(reply)
        return
    rows = reply.get("memories", [])
    note(f"{reply.get('count', len(rows))} memories")
    click.echo(
        table(
            rows,
            [
                ("id", "ID"),
                ("tier", "TIER"),
                ("priority", "P"),
                ("namespace", "NAMESPACE"),
                ("title", "TITLE"),
                ("updated_at", "UPDATED"),
            ],
        )
    )


@memories.command("get")
@click.argument("memory_id")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def get(state: CliState, memory_id: str, as_json: bool) -> None:
    """Show one memory."""
    reply = state.client().get(f"/api/v1/memories/{memory_id}")
    if as_json:
        print_json(reply)
        return
    memory = reply.get("memory", reply) if isinstance(reply, dict) else reply
    click.echo(
        f"{memory.get('id')}  [{memory.get('tier')}] p{memory.get('priority')}  {memory.get('namespace')}"
    )
    click.echo(f"  {memory.get('title')}")
    if memory.get("tags"):
        click.echo(f"  tags: {', '.join(memory['tags'])}")
    click.echo(
        f"  created {memory.get('created_at')}  updated {memory.get('updated_at')}"
        f"  expires {memory.get('expires_at') or 'never'}"
    )
    click.echo(indent(str(memory.get("content", ""))))


@memories.command("delete")
@click.argument("memory_id")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def delete(state: CliState, memory_id: str, as_json: bool) -> None:
    """Delete one memory (the delete replicates; it does not come back)."""
    reply = state.client().delete(f"/api/v1/memories/{memory_id}")
    if as_json:
        print_json(reply)
        return
    click.echo(f"deleted {memory_id}")


@memories.command("promote")
@click.argument("memory_id")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def promote(state: CliState, memory_id: str, as_json: bool) -> None:
    """Promote one memory to the long tier."""
    reply = state.client().post(f"/api/v1/memories/{memory_id}/promote")
    if as_json:
        print_json(reply)
        return
    click.echo(f"promoted {memory_id}")
