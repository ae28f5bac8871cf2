"""``ai-memory approvals list|approve|reject``: the approval queue.

A send that an admission decider answered ``pending`` for waits in its
recipient's mailbox as ``awaiting_approval``: nobody can pop it until an
approver (write on the recipient project) approves it, which puts it back
at its original place in the queue, or rejects it, which ends it. ``list``
shows a project's waiting messages (the current project, see
:mod:`cli.scope`); ``approve`` / ``reject`` take a message id. A message is
decided once: a second decision, from anyone, exits 4 and names the one
that stands.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from cli.client import drop_none
from cli.message import render_listed, scope_options
from cli.output import print_json
from cli.scope import how_to_name, resolve_scope
from cli.state import CliState, pass_state
from common.errors import BadRequest


@click.group()
def approvals() -> None:
    """List, approve and reject mail held for an approver."""


@approvals.command("list")
@scope_options
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def list_approvals(state: CliState, workspace: str | None, project: str | None,
                   as_json: bool) -> None:
    """Messages awaiting approval in a project's mailbox, oldest first."""
    scope = resolve_scope(workspace, project)
    if scope is None:
        raise BadRequest(f"name the mailbox's project: {how_to_name()}")
    reply = state.client().get("/api/v1/approvals", workspace=scope.workspace,
                               project=scope.project)
    if as_json:
        print_json(reply)
        return
    rows = reply.get("messages") or []
    if not rows:
        click.echo(f"no messages awaiting approval in {scope.workspace}/{scope.project}")
        return
    for row in rows:
        click.echo(render_listed(row))
        if row.get("approval_note"):
            click.echo(f"  held because: {row['approval_note']}")
    click.echo(f"{len(rows)} awaiting approval; decide with `ai-memory approvals approve ID` "
               "or `ai-memory approvals reject ID`")


def _decide(state: CliState, message_id: str, verb: str, reason: str | None,
            as_json: bool) -> None:
    reply: Any = state.client().post(f"/api/v1/approvals/{quote(message_id, safe='')}/{verb}",
                                     drop_none({"reason": reason}))
    if as_json:
        print_json(reply)
        return
    msg = reply.get("message") or {}
    click.echo(f"{reply.get('decision')} {message_id}: now {msg.get('state', '?')}")


@approvals.command("approve")
@click.argument("message_id")
@click.option("--reason", help="Why (kept with the decision and sent in approval_decided).")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def approve(state: CliState, message_id: str, reason: str | None, as_json: bool) -> None:
    """Let MESSAGE_ID into its project's queue, at its original place."""
    _decide(state, message_id, "approve", reason, as_json)


@approvals.command("reject")
@click.argument("message_id")
@click.option("--reason", help="Why (kept with the decision and sent in approval_decided).")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def reject(state: CliState, message_id: str, reason: str | None, as_json: bool) -> None:
    """Refuse MESSAGE_ID for good: it is never claimed."""
    _decide(state, message_id, "reject", reason, as_json)
