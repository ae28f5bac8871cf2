"""The operations of sessions, projects and project mail (see :mod:`daemon.api.call`).

Each hands the caller (:func:`daemon.http.auth.principal_of`) to
:mod:`daemon.services.mail`, which asks :func:`common.policy.check` once it
knows the projects involved."""

from __future__ import annotations

from typing import Annotated, Any

from aiohttp import web
from pydantic import Field, StringConstraints

from common import limits
from common.randomid import uuid4
from common.vocab import CONSISTENCY_DEFAULT, NATURE_DEFAULT, Box, Consistency, Nature, Result
from daemon.api.call import ApiCall, Route, serve
from daemon.http.auth import owner_user
from daemon.schemas.validation import (
    AgentId,
    ClaimToken,
    LeaseSeconds,
    Lenient,
    RequestId,
    ScopeName,
    Strict,
    text,
    validate,
)
from daemon.services import completion, mail
from daemon.services import handoff as handoffs

MessageId = Annotated[str, StringConstraints(min_length=1, max_length=64,
                                             pattern=r"^[A-Za-z0-9\-]+$")]


class SessionIn(Strict):
    workspace: ScopeName
    project: ScopeName
    harness: ScopeName
    session_id: RequestId | None = None
    owner_user: AgentId | None = None


class SendIn(Strict):
    to_workspace: ScopeName
    to_project: ScopeName
    to_agent: ScopeName | None = None
    from_workspace: ScopeName | None = None
    from_project: ScopeName | None = None
    from_agent: ScopeName | None = None
    subject: text(10 * limits.message_subject_max_chars) | None = None  # type: ignore[valid-type]
    body: text(limits.request_body_max_bytes, min_chars=1)  # type: ignore[valid-type]
    nature: Nature = NATURE_DEFAULT
    evidence: text(10 * limits.message_evidence_max_chars) | None = None  # type: ignore[valid-type]
    in_reply_to: MessageId | None = None


class ReplyIn(Strict):
    """Answer ``message_id``: sent to the project it came from, in its thread."""

    message_id: MessageId
    body: text(limits.request_body_max_bytes, min_chars=1)  # type: ignore[valid-type]
    subject: text(10 * limits.message_subject_max_chars) | None = None  # type: ignore[valid-type]
    to_agent: ScopeName | None = None
    from_workspace: ScopeName | None = None
    from_project: ScopeName | None = None
    nature: Nature = NATURE_DEFAULT
    evidence: text(10 * limits.message_evidence_max_chars) | None = None  # type: ignore[valid-type]


class CompleteIn(Strict):
    message_id: MessageId
    result: Result
    note: text(10 * limits.completion_note_max_chars) | None = None  # type: ignore[valid-type]
    claim_token: ClaimToken | None = None


class RenewIn(Strict):
    message_id: MessageId
    claim_token: ClaimToken
    lease_seconds: LeaseSeconds | None = None


class ListIn(Lenient):
    box: Box = "inbox"
    workspace: ScopeName | None = None
    project: ScopeName | None = None
    limit: Annotated[int, Field(ge=1, le=limits.message_list_limit_max)] = (
        limits.message_list_limit_default)
    agent: ScopeName | None = None
    consistency: Consistency = CONSISTENCY_DEFAULT
    thread_id: MessageId | None = None
    all: bool = False  # every state, newest first (outcomes included)


class PopIn(Strict):
    workspace: ScopeName | None = None
    project: ScopeName | None = None
    message_id: MessageId | None = None
    agent: ScopeName | None = None
    request_id: RequestId | None = None
    lease_seconds: LeaseSeconds | None = None


class CancelIn(Strict):
    workspace: ScopeName | None = None
    project: ScopeName | None = None
    message_id: MessageId | None = None
    all: bool = False


class ScopeQuery(Lenient):
    workspace: ScopeName | None = None
    project: ScopeName | None = None
    inbox_only: str | None = None
    harness: ScopeName | None = None


class HandoffQuery(ScopeQuery):
    handoff: str | None = None  # "0": do not claim the pending handoff
    brief: str | None = None  # "1": compile the project brief
    brief_budget: Annotated[int, Field(ge=limits.brief_budget_bytes_min,
                                       le=limits.brief_budget_bytes_max)] | None = None
    request_id: RequestId | None = None  # repeat a claim's to get the same answer


class HandoffIn(Strict):
    workspace: ScopeName | None = None
    project: ScopeName | None = None
    subject: text(10 * limits.message_subject_max_chars) | None = None  # type: ignore[valid-type]
    body: text(limits.request_body_max_bytes, min_chars=1)  # type: ignore[valid-type]
    from_agent: ScopeName | None = None


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.lower() in ("1", "true", "yes")


async def start_session(c: ApiCall) -> Any:
    body = await c.body(SessionIn)
    return await mail.start_session(
        c.node, c.principal, workspace=body.workspace, project=body.project,
        harness=body.harness, session_id=body.session_id or uuid4(), owner_user=body.owner_user)


async def list_projects(c: ApiCall) -> Any:
    return await mail.list_projects(c.node, c.principal)


async def send(c: ApiCall) -> Any:
    body = await c.body(SendIn)
    principal = c.principal
    return await mail.send(
        c.node, principal, mail.SendRequest(**body.model_dump()), session_id=c.session,
        owner_user=owner_user(principal), idempotency_key=c.idempotency_key)


async def list_messages(c: ApiCall) -> Any:
    q = c.params(ListIn)
    return await mail.list_box(c.node, c.principal, box=q.box, workspace=q.workspace,
                               project=q.project, session_id=c.session, limit=q.limit,
                               agent=q.agent, consistency=q.consistency,
                               thread_id=q.thread_id, every_state=q.all)


async def reply(c: ApiCall) -> Any:
    body = await c.body(ReplyIn)
    principal = c.principal
    return await mail.reply(
        c.node, principal, message_id=body.message_id, body=body.body, subject=body.subject,
        from_workspace=body.from_workspace, from_project=body.from_project,
        to_agent=body.to_agent, nature=body.nature, evidence=body.evidence,
        session_id=c.session, owner_user=owner_user(principal),
        idempotency_key=c.idempotency_key)


async def complete(c: ApiCall) -> Any:
    body = await c.body(CompleteIn)
    return await completion.complete(c.node, c.principal, message_id=body.message_id,
                                     result=body.result, note=body.note, session_id=c.session,
                                     token=body.claim_token)


async def renew(c: ApiCall) -> Any:
    body = await c.body(RenewIn)
    return await completion.renew(c.node, c.principal, message_id=body.message_id,
                                  token=body.claim_token, lease_secs=body.lease_seconds)


async def pop(c: ApiCall) -> Any:
    body = await c.body(PopIn)
    return await mail.pop(c.node, c.principal, workspace=body.workspace, project=body.project,
                          session_id=c.session, message_id=body.message_id, agent=body.agent,
                          request_id=body.request_id, lease_secs=body.lease_seconds)


async def cancel(c: ApiCall) -> Any:
    body = await c.body(CancelIn)
    return await mail.cancel(c.node, c.principal, workspace=body.workspace, project=body.project,
                             session_id=c.session, message_id=body.message_id,
                             cancel_all=body.all)


async def handoff(c: ApiCall) -> Any:
    q = c.params(HandoffQuery)
    if _flag(q.inbox_only, False):
        # The prompt hook's count-only notice: no claim, no brief, nothing recorded.
        return await mail.handoff_notice(
            c.node, c.principal, workspace=q.workspace, project=q.project,
            session_id=c.session, harness=q.harness, inbox_only=True)
    return await handoffs.session_start(
        c.node, c.principal, workspace=q.workspace, project=q.project, session_id=c.session,
        harness=q.harness, take_handoff=_flag(q.handoff, True), with_brief=_flag(q.brief, False),
        budget=q.brief_budget, request_id=q.request_id)


async def write_handoff(c: ApiCall) -> Any:
    body = await c.body(HandoffIn)
    principal = c.principal
    return await handoffs.write(
        c.node, principal, workspace=body.workspace, project=body.project, session_id=c.session,
        body=body.body, subject=body.subject, from_agent=body.from_agent,
        owner_user=owner_user(principal), idempotency_key=c.idempotency_key)


async def briefing(c: ApiCall) -> Any:
    q = c.params(ScopeQuery)
    return await mail.briefing(c.node, c.principal, workspace=q.workspace, project=q.project,
                               session_id=c.session)


class ApprovalsQuery(Lenient):
    workspace: ScopeName
    project: ScopeName


class DecideIn(Strict):
    reason: text(10 * limits.approval_reason_max_chars) | None = None  # type: ignore[valid-type]
    agent: ScopeName | None = None


class _MessagePath(Strict):
    id: MessageId


async def list_approvals(c: ApiCall) -> Any:
    q = c.params(ApprovalsQuery)
    return await mail.approvals(c.node, c.principal, workspace=q.workspace, project=q.project)


async def _decide(c: ApiCall, approve: bool) -> Any:
    mid = validate(_MessagePath, dict(c.path)).id
    body = await c.body(DecideIn)
    return await mail.decide(c.node, c.principal, message_id=mid, approve=approve,
                             reason=body.reason, by_agent=body.agent or c.principal.agent)


async def approve(c: ApiCall) -> Any:
    return await _decide(c, True)


async def reject(c: ApiCall) -> Any:
    return await _decide(c, False)


OPERATIONS = [
    Route("POST", "/api/v1/sessions", start_session, 201),
    Route("GET", "/api/v1/projects", list_projects),
    Route("POST", "/api/v1/messages", send, 201),
    Route("GET", "/api/v1/messages", list_messages),
    Route("POST", "/api/v1/messages/pop", pop),
    Route("POST", "/api/v1/messages/cancel", cancel),
    Route("POST", "/api/v1/messages/reply", reply, 201),
    Route("POST", "/api/v1/messages/complete", complete),
    Route("POST", "/api/v1/messages/renew", renew),
    Route("GET", "/api/v1/handoff", handoff),
    Route("GET", "/handoff", handoff),  # where the source document's hooks fetch it
    Route("POST", "/api/v1/handoff", write_handoff, 201),
    Route("POST", "/handoff", write_handoff, 201),
    Route("GET", "/api/v1/briefing", briefing),
    Route("GET", "/api/v1/approvals", list_approvals),
    Route("POST", "/api/v1/approvals/{id}/approve", approve),
    Route("POST", "/api/v1/approvals/{id}/reject", reject),
]


def add_routes(app: web.Application) -> None:
    serve(app, OPERATIONS)
