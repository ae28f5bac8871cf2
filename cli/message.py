"""``ai-memory message send|list|pop|cancel|reply|done``: claim-once mail between projects.

The current project (see :mod:`cli.scope`) is the sender of ``send`` and the
mailbox of ``list``, ``pop`` and ``cancel``. When nothing names it the CLI
sends no scope; the daemon then refuses send, pop and cancel (409, naming
the project it would have guessed), and the CLI says which flags, variables
or ``.ai-memory.toml`` table name the project (exit 4).

``pop`` always carries a request id (a new UUID unless ``--request-id``).
``pop --wait`` blocks on the mailbox's push stream (:mod:`cli.stream`) and
claims the first message it may take, each attempt under a new id. A pop
that finds nothing says so, says when the project does not exist (exit 3),
and names the harness that mail is waiting for and the command to pop it.
After a transport failure or a 503 it retries once with the same id, which
the daemon answers with the same message, so a lost reply never loses a
message. If both attempts fail the id is printed for a manual retry.
``send`` does the same with an ``Idempotency-Key`` (``--idempotency-key``
to reuse one, see :func:`cli.client.create_idempotently`).

A popped body is untrusted input from another project: it is printed after
its provenance and the daemon's security notice, never before them.

``reply ID`` answers message ID: mail back to the project that sent it, in
its thread (``--in-reply-to`` on ``send`` threads a send the same way).
``done ID --result done|blocked|rejected --note TEXT`` completes a message
this caller claimed; ``list --outbox --all`` shows how each one ended.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import click

from cli.body import read_body
from cli.client import ApiClient, create_idempotently, drop_none
from cli.output import indent, note, print_json
from cli.scope import Scope, how_to_name, name_the_project, resolve_scope
from cli.state import CliState, pass_state
from cli.stream import Event
from cli.stream import wait as wait_on_stream
from common import limits
from common.errors import AiMemoryError, NotFound, Unavailable
from common.lifecycle import AWAITING, PENDING
from common.vocab import (
    FROM_AGENT_UNNAMED,
    FROM_AGENT_UNNAMED_MEANING,
    NATURE_DEFAULT,
    NATURE_MEANINGS,
    NATURES,
    RESULTS,
)


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
    help="How you know what the body says: measured (you checked it; needs --evidence), "
    "reported (you were told), inferred (your conclusion); default unknown.",
)
@click.option("--evidence", help="What backs a measured claim: a command, file:line, a message id.")
@click.option("--from-workspace", help="Sender workspace (else env or .ai-memory.toml).")
@click.option("--from-project", help="Sender project (else env or .ai-memory.toml).")
@click.option(
    "--from-agent",
    help="Sending harness (e.g. codex), when no session of the sending project names one.",
)
@click.option("--in-reply-to", help="Thread it under this message (one you may read).")
@click.option(
    "--idempotency-key", help="Reuse the key of an earlier attempt so a retry is sent once."
)
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
    from_agent: str | None,
    in_reply_to: str | None,
    idempotency_key: str | None,
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
            "from_agent": from_agent,
            "subject": subject,
            "body": read_body(body, "message body"),
            "nature": nature,
            "evidence": evidence,
            "in_reply_to": in_reply_to,
        }
    )
    try:
        reply = create_idempotently(state.client(), "/api/v1/messages", request, idempotency_key)
    except AiMemoryError as exc:
        plain = name_the_project(exc, "sent", ("--from-workspace", "--from-project"))
        if plain is exc:
            raise
        raise plain from None
    if as_json:
        print_json(reply)
        return
    recipient = where(reply.get("to_workspace", to_workspace), reply.get("to_project", to_project))
    if reply.get("to_agent"):
        recipient += f" (for {reply['to_agent']})"
    _report_sent(reply, recipient)


def _report_sent(reply: dict[str, Any], recipient: str) -> None:
    click.echo(f"sent {reply.get('message_id')} to {recipient}: {reply.get('state', PENDING)}")
    if reply.get("in_reply_to"):
        click.echo(f"  in reply to {reply['in_reply_to']} (thread {reply.get('thread_id')})")
    if reply.get("state") == AWAITING:
        note("held for an approver by the recipient's admission policy"
             + (f" ({reply['approval_note']})" if reply.get("approval_note") else "")
             + "; nobody can pop it until someone runs `ai-memory approvals approve "
             + f"{reply.get('message_id')}`")
    truncated = [k for k, v in (reply.get("truncated") or {}).items() if v]
    if truncated:
        note(f"warning: the daemon truncated the {' and '.join(truncated)} to its size limit")
    if reply.get("scrubbed"):
        note(f"warning: the daemon scrubbed {reply['scrubbed']} secret(s) from the message")


def nature_line(msg: dict[str, Any]) -> str:
    """``nature: X (what X means)``, then the evidence when there is some."""
    nature = msg.get("nature") or NATURE_DEFAULT
    meaning = NATURE_MEANINGS.get(nature)
    line = f"nature: {nature}" + (f" ({meaning})" if meaning else "")
    return line + (f"; evidence: {msg['evidence']}" if msg.get("evidence") else "")


def agent_other_note(agents: list[Any]) -> str | None:
    """What ``agent other`` means, when a shown message carries it."""
    if FROM_AGENT_UNNAMED not in agents:
        return None
    return f"agent {FROM_AGENT_UNNAMED}: {FROM_AGENT_UNNAMED_MEANING}"


def render_listed(row: dict[str, Any]) -> str:
    sender = where(row.get("from_workspace_id"), row.get("from_project_id"))
    if row.get("from_agent"):
        sender += f" (agent {row['from_agent']})"
    recipient = where(row.get("to_workspace"), row.get("to_project"))
    if row.get("to_agent"):
        recipient += f" (for {row['to_agent']})"
    lines = [
        f"[{row.get('state', '?')}] {row.get('id')}  {sender} -> {recipient}  at {row.get('created_at', '?')}",
        f"  subject: {row.get('subject') or '-'}",
        f"  {nature_line(row)}",
    ]
    if row.get("in_reply_to"):
        lines.append(f"  in reply to {row['in_reply_to']} (thread {row.get('thread_id')})")
    done = row.get("completion")
    if done:
        lines.append(f"  completed: {done.get('result')} at {done.get('completed_at', '?')}"
                     + (f": {done['note']}" if done.get("note") else ""))
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
@click.option("--thread", "thread_id", help="Only this thread (a message's thread_id).")
@click.option(
    "--all", "every_state", is_flag=True,
    help="Every state, newest first: claimed (with how it ended) and cancelled too.",
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
    thread_id: str | None,
    every_state: bool,
    as_json: bool,
) -> None:
    """List pending mail of the current project (oldest first); reads, never claims."""
    scope = resolve_scope(workspace, project)
    reply = state.client().get(
        "/api/v1/messages",
        box="outbox" if outbox else "inbox",
        limit=limit,
        agent=agent,
        thread_id=thread_id,
        all=True if every_state else None,
        **scope_fields(scope),
    )
    if as_json:
        print_json(reply)
        return
    _refuse_unknown_project(reply, scope)
    resolved = reply.get("resolved_scope")
    if resolved:
        note(
            f"note: no project was named, so the node chose "
            f"{where(resolved.get('workspace'), resolved.get('project'))} "
            f"({reply.get('scope_source', 'inference')}); to name yours, {how_to_name()}"
        )
    rows = reply.get("messages", [])
    box = reply.get("box", "outbox" if outbox else "inbox")
    note(
        f"{len(rows)} {'messages' if every_state else 'pending'} in the {box} of "
        f"{where(reply.get('workspace'), reply.get('project'))}"
    )
    for row in rows:
        click.echo(render_listed(row))
    explained = agent_other_note([row.get("from_agent") for row in rows])
    if explained:
        note(explained)


def render_popped(reply: dict[str, Any]) -> str:
    msg = reply["message"]
    prov = reply.get("provenance") or {}
    sender = where(prov.get("from_workspace"), prov.get("from_project"))
    extras = [f"agent {prov['from_agent']}"] if prov.get("from_agent") else []
    if prov.get("from_owner_user"):
        extras.append(f"user {prov['from_owner_user']}")
    lines = [
        f"claimed {msg.get('id')} from {sender}" + (f" ({', '.join(extras)})" if extras else ""),
    ]
    if msg.get("claim_token"):
        redelivered = (msg.get("delivery") or 1) > 1
        lines.append(f"lease: until {msg.get('lease_until')}"
                     + (f" (delivery {msg.get('delivery')})" if redelivered else "")
                     + f"; claim token {msg['claim_token']}")
        lines.append(f"  renew: ai-memory message renew {msg.get('id')} --token "
                     f"{msg['claim_token']}; finish: ai-memory message done {msg.get('id')} "
                     f"--token {msg['claim_token']} --result done")
    explained = agent_other_note([prov.get("from_agent")])
    if explained:
        lines.append(f"  {explained}")
    lines += [f"subject: {msg.get('subject') or '-'}", nature_line(msg)]
    if reply.get("security_notice"):
        lines.append(f"security notice: {reply['security_notice']}")
    lines += ["", str(msg.get("body", ""))]
    return "\n".join(lines)


@message.command("pop")
@scope_options
@click.option("--id", "message_id", help="Claim this message instead of the oldest.")
@click.option("--agent", help="Claim as this harness (for mail addressed to one).")
@click.option("--request-id", help="Reuse an earlier pop's id to get the same message again.")
@click.option(
    "--wait", is_flag=True, help="If nothing is pending, block until a message arrives, claim it."
)
@click.option(
    "--lease", "lease_secs", type=click.FloatRange(min=limits.claim_lease_secs_min,
                                                   max=limits.claim_lease_secs_max),
    help="Claim for this many seconds only: renew or complete it with the printed claim "
         "token before then, or it goes back to the queue for the next pop.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    help="With --wait: give up after this many seconds (exit 8).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def pop(
    state: CliState,
    workspace: str | None,
    project: str | None,
    message_id: str | None,
    agent: str | None,
    request_id: str | None,
    wait: bool,
    lease_secs: float | None,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Claim the next message of the current project's inbox (exactly once).

    With --wait, block until one arrives (the daemon pushes it: no polling),
    then claim it; with --timeout S and nothing within S seconds, exit 8.
    """
    if timeout is not None and not wait:
        raise click.UsageError("--timeout goes with --wait")
    if wait and request_id:
        raise click.UsageError("--request-id replays one earlier pop; it does not go with --wait")
    scope = resolve_scope(workspace, project)
    client = state.client()
    base = drop_none({**scope_fields(scope), "message_id": message_id, "agent": agent,
                      "lease_seconds": lease_secs})
    if not wait:
        reply = _pop_once(client, base, request_id, scope, agent)
    else:
        reply = _pop_waiting(client, base, scope, agent, timeout)
    if as_json:
        print_json(reply)
        return
    if reply.get("message") is None:
        _refuse_unknown_project(reply, scope)
        ws, proj = _scope_pair(scope)
        note(f"no pending message in {where(reply.get('workspace', ws), reply.get('project', proj))}")
        hint = _harness_hint(client, scope, agent)
        if hint:
            note(hint)
        return
    click.echo(render_popped(reply))


def _pop_waiting(client: ApiClient, base: dict[str, Any], scope: Scope | None,
                 agent: str | None, timeout: float | None) -> dict[str, Any]:
    """``pop --wait``: claim at once, else on the mailbox's push stream."""
    hinted: list[bool] = []

    def attempt() -> dict[str, Any] | None:
        got = _pop_once(client, base, None, scope, agent)
        if got.get("message") is not None:
            return got
        _refuse_unknown_project(got, scope)
        if not hinted:  # say once why mail that is there is not ours
            hinted.append(True)
            hint = _harness_hint(client, scope, agent)
            if hint:
                note(hint)
        return None

    def announced(ev: Event) -> dict[str, Any] | None:
        # The stream announces a send as soon as this node holds it; the owner
        # lets it be claimed once a majority does, a moment later. Until then a
        # pop skips it, so try again briefly while the message is still pending.
        msg_id = ((ev.data or {}).get("message") or {}).get("id")
        deadline = time.monotonic() + limits.cli_wait_pop_settle_secs
        delay = 0.05
        while True:
            got = attempt()
            if got is not None or msg_id is None or time.monotonic() >= deadline:
                return got
            if not _still_pending(client, scope, agent, msg_id):
                return None  # someone else claimed it (or it was cancelled)
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    try:
        reply = wait_on_stream(
            client, "/api/v1/messages/stream",
            drop_none({**scope_fields(scope), "agent": agent}),
            timeout=timeout, check=attempt, on_event=announced,
            what=f"arrived in {where(*_scope_pair(scope))}", note=note)
    except AiMemoryError as exc:
        plain = name_the_project(exc, "popped")
        if plain is exc:
            raise
        raise plain from None
    return reply


def _pop_command(scope: Scope | None, agent: str | None, rid: str | None = None) -> str:
    parts = ["ai-memory message pop"]
    if scope is not None:
        parts += [f"--workspace {scope.workspace}", f"--project {scope.project}"]
    if agent:
        parts.append(f"--agent {agent}")
    if rid:
        parts.append(f"--request-id {rid}")
    return " ".join(parts)


def _pop_once(client: ApiClient, base: dict[str, Any], request_id: str | None,
              scope: Scope | None, agent: str | None) -> dict[str, Any]:
    rid = request_id or str(uuid.uuid4())
    request = {**base, "request_id": rid}
    try:
        reply: dict[str, Any] = client.retrying_once(
            lambda: client.post("/api/v1/messages/pop", request))
    except AiMemoryError as exc:
        plain = name_the_project(exc, "popped")
        if plain is not exc:
            raise plain from None
        if not isinstance(exc, Unavailable):
            raise
        exc.details.setdefault(
            "hint",
            f"the claim may have happened; run `{_pop_command(scope, agent, rid)}` "
            "to get the same message",
        )
        raise
    return reply


def _still_pending(client: ApiClient, scope: Scope | None, agent: str | None,
                   msg_id: str) -> bool:
    listed = client.get("/api/v1/messages", box="inbox", limit=limits.message_list_limit_max,
                        agent=agent, **scope_fields(scope))
    return any(row.get("id") == msg_id for row in listed.get("messages", []))


def _refuse_unknown_project(reply: dict[str, Any], scope: Scope | None) -> None:
    if reply.get("project_exists") is False:
        name = where(reply.get("workspace"), reply.get("project"))
        if scope is None:
            raise NotFound(f"no project was named, and the node's guess, {name}, does not exist: "
                           f"{how_to_name()}")
        raise NotFound(
            f"project {name} does not exist: a project exists once an agent has started a "
            "session there (`ai-memory session start`); check --workspace/--project",
            hint="`ai-memory message send` refuses an unknown project the same way")


def _harness_hint(client: ApiClient, scope: Scope | None, agent: str | None) -> str | None:
    """When a pop found nothing it may claim but mail waits for a harness, say how to pop it."""
    try:
        listed = client.get("/api/v1/messages", box="inbox",
                            limit=limits.message_list_limit_max, **scope_fields(scope))
    except AiMemoryError:
        return None  # only a hint: the pop's own answer stands
    waiting: dict[str, int] = {}
    for row in listed.get("messages", []):
        harness = row.get("to_agent")
        if harness and harness != agent:
            waiting[harness] = waiting.get(harness, 0) + 1
    if not waiting:
        return None
    box = where(listed.get("workspace"), listed.get("project"))
    resolved = scope or Scope(str(listed.get("workspace")), str(listed.get("project")), "daemon")
    lines = [f"{n} message{'s' if n != 1 else ''} in {box} "
             f"{'wait' if n != 1 else 'waits'} for harness {h}: pop "
             f"{'them' if n != 1 else 'it'} with `{_pop_command(resolved, h)}`"
             for h, n in sorted(waiting.items())]
    return "\n".join(lines)


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
    try:
        reply = state.client().post("/api/v1/messages/cancel", request)
    except AiMemoryError as exc:
        plain = name_the_project(exc, "cancelled")
        if plain is exc:
            raise
        raise plain from None
    if as_json:
        print_json(reply)
        return
    cancelled = reply.get("cancelled", [])
    click.echo(f"cancelled {reply.get('count', len(cancelled))}")
    for cancelled_id in cancelled:
        click.echo(f"  {cancelled_id}")


@message.command("reply")
@click.argument("message_id")
@click.argument("body", required=False)
@click.option("--subject", help="Default: decision-reply: ID to a decision: question, else Re: ...")
@click.option("--to-agent", help="Only this harness of the sending project may claim it.")
@click.option(
    "--nature", type=click.Choice(NATURES), help="How you know what the body says (as for send)."
)
@click.option("--evidence", help="What backs a measured claim.")
@click.option(
    "--from-workspace", help="Your workspace (default: the project that received ID)."
)
@click.option("--from-project", help="Your project (default: the project that received ID).")
@click.option(
    "--idempotency-key", help="Reuse the key of an earlier attempt so a retry is sent once."
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def reply(
    state: CliState,
    message_id: str,
    body: str | None,
    subject: str | None,
    to_agent: str | None,
    nature: str | None,
    evidence: str | None,
    from_workspace: str | None,
    from_project: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Answer message MESSAGE_ID with BODY (or stdin): mail to the project that sent it."""
    request = drop_none({
        "message_id": message_id, "body": read_body(body, "reply body"), "subject": subject,
        "to_agent": to_agent, "nature": nature, "evidence": evidence,
        "from_workspace": from_workspace, "from_project": from_project,
    })
    answer = create_idempotently(state.client(), "/api/v1/messages/reply", request,
                                 idempotency_key)
    if as_json:
        print_json(answer)
        return
    _report_sent(answer, where(answer.get("to_workspace"), answer.get("to_project")))


@message.command("done")
@click.argument("message_id")
@click.option("--result", type=click.Choice(RESULTS), required=True,
              help="done, blocked (could not finish) or rejected (will not do it).")
@click.option("--note", "note_text",
              help="What the sender should know (scrubbed, capped like a body).")
@click.option("--token", "claim_token",
              help="The claim token of a message popped with --lease (required then).")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def done(state: CliState, message_id: str, result: str, note_text: str | None,
         claim_token: str | None, as_json: bool) -> None:
    """Complete MESSAGE_ID, which this caller claimed: the sender sees the result and note."""
    client = state.client()
    request = drop_none({"message_id": message_id, "result": result, "note": note_text,
                         "claim_token": claim_token})
    answer: dict[str, Any] = client.retrying_once(
        lambda: client.post("/api/v1/messages/complete", request))
    if as_json:
        print_json(answer)
        return
    completion = answer.get("completion") or {}
    click.echo(f"completed {message_id}: {completion.get('result', result)}"
               + (" (already recorded)" if answer.get("replayed") else ""))
    if (answer.get("truncated") or {}).get("note"):
        note("warning: the daemon truncated the note to its size limit")


@message.command("renew")
@click.argument("message_id")
@click.option("--token", "claim_token", required=True,
              help="The claim token the leased pop printed.")
@click.option("--lease", "lease_secs", type=click.FloatRange(
    min=limits.claim_lease_secs_min, max=limits.claim_lease_secs_max),
    help="The new lease in seconds, from now (default: the pop's length).")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def renew(state: CliState, message_id: str, claim_token: str, lease_secs: float | None,
          as_json: bool) -> None:
    """Extend the lease on MESSAGE_ID, popped with --lease, before it runs out.

    Once the lease ran out the message went back to the queue: the renewal is
    refused (exit 4, code lease_lost) and someone else may hold it now.
    """
    client = state.client()
    request = drop_none({"message_id": message_id, "claim_token": claim_token,
                         "lease_seconds": lease_secs})
    answer: dict[str, Any] = client.retrying_once(
        lambda: client.post("/api/v1/messages/renew", request))
    if as_json:
        print_json(answer)
        return
    click.echo(f"renewed {message_id}: lease until {answer.get('lease_until')}")
