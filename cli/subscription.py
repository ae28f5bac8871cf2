"""``ai-memory subscription list|add|remove|dead-letters|replay``: this node's webhooks.

``add`` subscribes a URL (``POST /api/v1/subscriptions``) under an
``Idempotency-Key``, so a retry after a dropped connection cannot make a
second subscription; when the daemon generates the secret, it is printed
once, here, and never again. ``--events`` takes what the daemon takes:
``*`` (the default), or names separated by commas, ours or upstream's.
``dead-letters`` lists deliveries that ran out of retries and ``replay``
puts them back in the outbox (by delivery id, or seq), to be tried afresh.
"""

from __future__ import annotations

import urllib.parse

import click

from cli.client import create_idempotently, drop_none
from cli.output import note, print_json, table
from cli.state import CliState, pass_state

PATH = "/api/v1/subscriptions"


@click.group()
def subscription() -> None:
    """Webhook subscriptions: signed POSTs of this node's events to a URL."""


@subscription.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def list_subscriptions(state: CliState, as_json: bool) -> None:
    """Show this node's subscriptions (never their secrets)."""
    reply = state.client().get(PATH)
    if as_json:
        print_json(reply)
        return
    rows = [{**s, "events": ",".join(s.get("events") or []) or "*"}
            for s in reply.get("subscriptions", [])]
    click.echo(table(rows, [("id", "ID"), ("url", "URL"), ("events", "EVENTS"),
                            ("namespace", "PREFIX"), ("namespace_filter", "NAMESPACE"),
                            ("agent_filter", "AGENT"), ("signature_version", "SIGNATURE"),
                            ("created_by", "BY")]))


@subscription.command("add")
@click.argument("url")
@click.option("--events", default="*", show_default=True,
              help="Event names separated by commas, or * for every event.")
@click.option("--namespace", help="Only events whose namespace starts with this prefix.")
@click.option("--namespace-filter", help="Only events in exactly this namespace.")
@click.option("--agent-filter", help="Only events by (or to) exactly this agent.")
@click.option("--secret", help="Shared secret for the signatures (default: one is generated).")
@click.option("--signature-version", type=click.Choice(["secret", "sha256-key"]),
              help="What X-AI-Memory-Signature carries (default: secret, the document's recipe).")
@click.option("--idempotency-key", help="Reuse the key of an earlier attempt.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def add(state: CliState, url: str, events: str, namespace: str | None,
        namespace_filter: str | None, agent_filter: str | None, secret: str | None,
        signature_version: str | None, idempotency_key: str | None, as_json: bool) -> None:
    """Subscribe URL to this node's events."""
    body = drop_none({"url": url, "events": events, "namespace": namespace,
                      "namespace_filter": namespace_filter, "agent_filter": agent_filter,
                      "secret": secret, "signature_version": signature_version})
    reply = create_idempotently(state.client(), PATH, body, idempotency_key)
    if as_json:
        print_json(reply)
        return
    click.echo(f"subscribed {reply['id']} -> {reply['url']}")
    if reply.get("secret"):
        click.echo(f"secret: {reply['secret']}")
        note("the secret is shown once: keep it with the receiver")


@subscription.command("remove")
@click.argument("sub_ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON replies.")
@pass_state
def remove(state: CliState, sub_ids: tuple[str, ...], as_json: bool) -> None:
    """Delete subscriptions SUB_IDS and their undelivered events."""
    client = state.client()
    for sub_id in sub_ids:
        reply = client.delete_with(PATH, id=sub_id)
        if as_json:
            print_json(reply)
        else:
            click.echo(f"removed {sub_id} ({reply.get('undelivered_dropped', 0)} undelivered "
                       "dropped)")


@subscription.command("dead-letters")
@click.option("--limit", type=click.IntRange(1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def dead_letters(state: CliState, limit: int, as_json: bool) -> None:
    """Show deliveries that ran out of retries, oldest first."""
    reply = state.client().get(f"{PATH}/dead-letters", limit=limit)
    if as_json:
        print_json(reply)
        return
    click.echo(table(reply.get("dead_letters", []),
                     [("seq", "SEQ"), ("delivery_id", "DELIVERY"), ("sub_id", "SUBSCRIPTION"),
                      ("event", "EVENT"), ("attempts", "TRIES"), ("last_error", "LAST ERROR"),
                      ("created_at", "CREATED")]))


@subscription.command("replay")
@click.argument("refs", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON replies.")
@pass_state
def replay(state: CliState, refs: tuple[str, ...], as_json: bool) -> None:
    """Put dead letters REFS (delivery ids or seqs) back in the outbox."""
    client = state.client()
    for ref in refs:
        reply = client.post(f"{PATH}/dead-letters/{urllib.parse.quote(ref, safe='')}/replay")
        if as_json:
            print_json(reply)
        else:
            click.echo(f"replayed {reply['delivery_id']} ({reply['event']} to "
                       f"{reply['sub_id']}) as seq {reply['seq']}")
