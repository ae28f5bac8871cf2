"""``ai-memory message send|list|pop|cancel``: claim-once mail between projects.

The current project (see :mod:`cli.scope`) is the sender of ``send`` and the
mailbox of ``list``, ``pop`` and ``cancel``. When nothing names it the CLI
sends no scope; the daemon then refuses send, pop and cancel (409, naming
the project it would have guessed) and the refusal is printed as it came.

``pop`` always carries a request id (a new UUID unless ``--request-id``).
After a transport failure or a 503 it retries once with the same id, which
the daemon answers with the same message, so a lost reply never loses a
message. If both attempts fail the id is printed for a manual retry.
``send`` does the same with an ``Idempotency-Key``.

A popped body is untrusted input from another project: it is printed after
its provenance and the daemon's security notice, never before them.
"""

from __future__ import annotations

import uuid
from typing import Any

import click

from cli.body import read_body
from cli.client import drop_none
from cli.output import indent, note, print_json
from cli.scope import Scope, resolve_scope
from cli.state import CliState, pass_state
from common import limits
from common.errors import Unavailable
from common.lifecycle import PENDING
from common.vocab import NATURE_DEFAULT, NATURES


def scope_options(fn: Any) -> Any:
    fn = click.option("--project", help="Project of the mailbox (else env or .ai-memory.toml).")(fn)
    fn = click.option(
        "--workspace", help="Workspace of the mailbox (else env or .ai-memory.toml)."
    )(fn)
    return fn


def scope_fields(scope: Scope | None) -> dict[str, str]:
    return {"workspace": scope.workspace, "project": scope.project} if scope else {}


def where(workspace: Any, project: Any) -> str:
    return f"{workspace}/{project}" if workspace or project else "the daemon's default project"


@click.group()
def message() -> None:
    """Send, list, claim and cancel mail between projects."""


@message.command("send")
@click.argument("body", required=False)
@click.option("--to-workspace", required=True, help="Workspace of the recipient project.")
@click.option("--to-project", required=True, help="Recipient project.")
@click.option("--to-agent", help="Only this harness (e.g. codex) may claim the message.")
@click.option("--subject", help=f"One line, at most {limits.message_subject_max_chars} characters.")
@click.option(
    "--nature",
    type=click.Choice(NATURES),
    help="How the sender knows: measured needs --evidence (default unknown).",
)
@click.option("--evidence", help="What backs a measured claim: a command, file:line, a message id.")
@click.option("--from-workspace", help="Sender workspace (else env or .ai-memory.toml).")
@click.option("--from-project", help="Sender project (else env or .ai-memory.toml).")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def send(
    state: CliState,
    body: str | None,
    to_workspace: str,
    to_project: str,
    to_agent: str | None,
    subject: str | None,
    nature: str | None,
    evidence: str | None,
    from_workspace: str | None,
    from_project: str | None,
    as_json: bool,
) -> None:
    """Send BODY (or stdin) to another project's mailbox."""
    sender = resolve_scope(
        from_workspace, from_project, flag_names=("--from-workspace", "--from-project")
    )
    request = drop_none(
        {
            "to_workspace": to_workspace,
            "to_project": to_project,
            "to_agent": to_agent,
            "from_workspace": sender.workspace if sender else None,
            "from_project": sender.project if sender else None,
            "subject": subject,
            "body": read_body(body, "message body"),
            "nature": nature,
            "evidence": evidence,
        }
    )
    client = state.client()
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    reply = client.retrying_once(lambda: client.post("/api/v1/messages", request, headers=headers))
    if as_json:
        print_json(reply)
        return
    recipient = where(reply.get("to_workspace", to_workspace), reply.get("to_project", to_project))
    if reply.get("to_agent"):
        recipient += f" (for {reply['to_agent']})"
    click.echo(f"sent {reply.get('message_id')} to {recipient}: {reply.get('state', PENDING)}")
    truncated = [k for k, v in (reply.get("truncated") or {}).items() if v]
    if truncated:
        note(f"warning: the daemon truncated the {' and '.join(truncated)} to its size limit")
    if reply.get("scrubbed"):
        note(f"warning: the daemon scrubbed {reply['scrubbed']} secret(s) from the message")


def render_listed(row: dict[str, Any]) -> str:
    sender = where(row.get("from_workspace_id"), row.get("from_project_id"))
    if row.get("from_agent"):
        sender += f" ({row['from_agent']})"
    recipient = where(row.get("to_workspace"), row.get("to_project"))
    if row.get("to_agent"):
        recipient += f" (for {row['to_agent']})"
    lines = [
        f"[{row.get('state', '?')}] {row.get('id')}  {sender} -> {recipient}  at {row.get('created_at', '?')}",
        f"  subject: {row.get('subject') or '-'}",
        f"  nature: {row.get('nature') or NATURE_DEFAULT}"
        + (f"  evidence: {row['evidence']}" if row.get("evidence") else ""),
    ]
    if row.get("body"):
        lines.append(indent(str(row["body"])))
    return "\n".join(lines)


@message.command("list")
@scope_options
@click.option("--outbox", is_flag=True, help="What this project sent, instead of its inbox.")
@click.option("--agent", help="Only mail this harness could claim.")
@click.option(
    "--limit",
    type=click.IntRange(1, limits.message_list_limit_max),
    help=f"At most this many (default {limits.message_list_limit_default}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def list_messages(
    state: CliState,
    workspace: str | None,
    project: str | None,
    outbox: bool,
    agent: str | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """List pending mail of the current project (oldest first); reads, never claims."""
    scope = resolve_scope(workspace, project)
    reply = state.client().get(
        "/api/v1/messages",
        box="outbox" if outbox else "inbox",
        limit=limit,
        agent=agent,
        **scope_fields(scope),
    )
    if as_json:
        print_json(reply)
        return
    resolved = reply.get("resolved_scope")
    if resolved:
        note(
            f"note: the daemon chose {where(resolved.get('workspace'), resolved.get('project'))} "
            f"by {reply.get('scope_source', 'inference')}; {reply.get('hint', '')}".rstrip("; ")
        )
    rows = reply.get("messages", [])
    box = reply.get("box", "outbox" if outbox else "inbox")
    note(
        f"{len(rows)} pending in the {box} of {where(reply.get('workspace'), reply.get('project'))}"
    )
    for row in rows:
        click.echo(render_listed(row))


def render_popped(reply: dict[str, Any]) -> str:
    msg = reply["message"]
    prov = reply.get("provenance") or {}
    sender = where(prov.get("from_workspace"), prov.get("from_project"))
    extras = [f"agent {prov['from_agent']}"] if prov.get("from_agent") else []
    if prov.get("from_owner_user"):
        extras.append(f"user {prov['from_owner_user']}")
    lines = [
        f"claimed {msg.get('id')} from {sender}" + (f" ({', '.join(extras)})" if extras else ""),
        f"subject: {msg.get('subject') or '-'}",
        f"nature: {msg.get('nature') or NATURE_DEFAULT}"
        + (f"  evidence: {msg['evidence']}" if msg.get("evidence") else ""),
    ]
    if reply.get("security_notice"):
        lines.append(f"security notice: {reply['security_notice']}")
    lines += ["", str(msg.get("body", ""))]
    return "\n".join(lines)


@message.command("pop")
@scope_options
@click.option("--id", "message_id", help="Claim this message instead of the oldest.")
@click.option("--agent", help="Claim as this harness (for mail addressed to one).")
@click.option("--request-id", help="Reuse an earlier pop's id to get the same message again.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def pop(
    state: CliState,
    workspace: str | None,
    project: str | None,
    message_id: str | None,
    agent: str | None,
    request_id: str | None,
    as_json: bool,
) -> None:
    """Claim the next message of the current project's inbox (exactly once)."""
    scope = resolve_scope(workspace, project)
    rid = request_id or str(uuid.uuid4())
    request = drop_none(
        {**scope_fields(scope), "message_id": message_id, "agent": agent, "request_id": rid}
    )
    client = state.client()
    try:
        reply = client.retrying_once(lambda: client.post("/api/v1/messages/pop", request))
    except Unavailable as exc:
        exc.details.setdefault(
            "hint",
            f"the claim may have happened; run `ai-memory message pop --request-id {rid}` "
            "to get the same message",
        )
        raise
    if as_json:
        print_json(reply)
        return
    if reply.get("message") is None:
        note(f"no pending message in {where(*_scope_pair(scope))}")
        return
    click.echo(render_popped(reply))


def _scope_pair(scope: Scope | None) -> tuple[str | None, str | None]:
    return (scope.workspace, scope.project) if scope else (None, None)


@message.command("cancel")
@scope_options
@click.option("--id", "message_id", help="Retract this message.")
@click.option(
    "--all", "cancel_all", is_flag=True, help="Retract every pending message this project sent."
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def cancel(
    state: CliState,
    workspace: str | None,
    project: str | None,
    message_id: str | None,
    cancel_all: bool,
    as_json: bool,
) -> None:
    """Retract pending mail this project sent (one with --id, or --all)."""
    if bool(message_id) == cancel_all:
        raise click.UsageError("pass exactly one of --id ID or --all")
    scope = resolve_scope(workspace, project)
    request: dict[str, Any] = {**scope_fields(scope)}
    if cancel_all:
        request["all"] = True
    else:
        request["message_id"] = message_id
    reply = state.client().post("/api/v1/messages/cancel", request)
    if as_json:
        print_json(reply)
        return
    cancelled = reply.get("cancelled", [])
    click.echo(f"cancelled {reply.get('count', len(cancelled))}")
    for cancelled_id in cancelled:
        click.echo(f"  {cancelled_id}")
