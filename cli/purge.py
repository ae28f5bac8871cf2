"""``ai-memory project purge|cleanup`` and ``ai-memory workspace purge`` (issue 27).

A purge removes, on every node, the messages addressed to the project (in
any state), its sessions (the project stops existing until a session starts
there again) and the memories under its namespace, and leaves an audit
record (a memory in ``_audit/purge``). It asks before it acts unless
``--yes``; it needs a root key or, for a project, write on its whole
workspace (docs/security.md). A retry after a lost answer is safe: the
command sends an ``Idempotency-Key`` of its own, which ``--idempotency-key``
can fix so that a second run is the same purge.
"""

from __future__ import annotations

import uuid
from typing import Any

import click

from cli.output import print_json
from cli.state import CliState, pass_state


def _split(target: str) -> tuple[str, str]:
    ws, sep, proj = target.partition("/")
    if not sep or not ws or not proj or "/" in proj:
        raise click.BadParameter("give it as WORKSPACE/PROJECT", param_hint="TARGET")
    return ws, proj


def _confirm(yes: bool, what: str) -> None:
    if yes:
        return
    click.confirm(f"Purge {what}? Its messages, sessions and memories go on every node; "
                  "this cannot be undone", abort=True)


def _purge(state: CliState, path: str, reason: str | None, key: str | None) -> Any:
    headers = {"Idempotency-Key": key or f"cli-{uuid.uuid4()}"}
    body = {} if reason is None else {"reason": reason}
    return state.client().post(path, body, headers=headers)


def _report(reply: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(reply)
        return
    target = reply["workspace"] + ("" if reply.get("project") is None
                                   else f"/{reply['project']}")
    removed = reply.get("messages_removed")
    click.echo(f"purged {target}: {'the' if removed is None else removed} messages, "
               f"{reply['memories_removed']} memories removed; audit record "
               f"{reply['audit_id']}")
    if reply.get("memories_left"):
        click.echo("more memories are left under its namespace: run the purge again", err=True)


_reason = click.option("--reason", help="Why (kept in the audit record).")
_yes = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
_key = click.option("--idempotency-key", help="Make a rerun the same purge (default: a new one).")
_json = click.option("--json", "as_json", is_flag=True, help="Print the JSON reply.")


@click.group()
def project() -> None:
    """Purge a project, or clean up empty ones."""


@project.command("purge")
@click.argument("target", metavar="WORKSPACE/PROJECT")
@_reason
@_yes
@_key
@_json
@pass_state
def purge_project(state: CliState, target: str, reason: str | None, yes: bool,
                  idempotency_key: str | None, as_json: bool) -> None:
    """Remove a project's mail, sessions and memories everywhere."""
    ws, proj = _split(target)
    _confirm(yes, f"project {ws}/{proj}")
    _report(_purge(state, f"/api/v1/projects/{ws}/{proj}/purge", reason, idempotency_key),
            as_json)


@project.command("cleanup")
@click.option("--idle-days", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Only projects idle this long.")
@_json
@pass_state
def cleanup(state: CliState, idle_days: float, as_json: bool) -> None:
    """Remove now the empty projects (no message names them) idle --idle-days (root)."""
    reply = state.client().post("/api/v1/projects/cleanup",
                                {"idle_secs": int(idle_days * 86_400)})
    if as_json:
        print_json(reply)
        return
    click.echo("removed: " + (", ".join(reply["removed"]) or "none"))
    if reply["kept"]:
        click.echo("kept (a message arrived): " + ", ".join(reply["kept"]))


@click.group()
def workspace() -> None:
    """Purge a whole workspace."""


@workspace.command("purge")
@click.argument("name", metavar="WORKSPACE")
@_reason
@_yes
@_key
@_json
@pass_state
def purge_workspace(state: CliState, name: str, reason: str | None, yes: bool,
                    idempotency_key: str | None, as_json: bool) -> None:
    """Remove every project of a workspace: mail, sessions, memories (root)."""
    _confirm(yes, f"workspace {name} and every project in it")
    _report(_purge(state, f"/api/v1/workspaces/{name}/purge", reason, idempotency_key), as_json)
