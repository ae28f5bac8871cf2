"""HTTP handlers for sessions, projects and project mail.

Each handler hands the caller (:func:`daemon.http.auth.principal_of`) to
:mod:`daemon.services.mail`, which asks :func:`common.policy.check` once it
knows the projects involved."""

from __future__ import annotations

from typing import Annotated

from aiohttp import web
from pydantic import Field, StringConstraints

from common import limits
from common.randomid import uuid4
from common.vocab import CONSISTENCY_DEFAULT, NATURE_DEFAULT, Box, Consistency, Nature
from daemon.http.appkeys import NODE
from daemon.http.auth import owner_user, principal_of
from daemon.http.errors import query_model, read_json
from daemon.schemas.headers import session_id
from daemon.schemas.ids import check_idempotency_key
from daemon.schemas.validation import AgentId, Lenient, RequestId, ScopeName, Strict, text
from daemon.services import mail

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


class ListIn(Lenient):
    box: Box = "inbox"
    workspace: ScopeName | None = None
    project: ScopeName | None = None
    limit: Annotated[int, Field(ge=1, le=limits.message_list_limit_max)] = (
        limits.message_list_limit_default)
    agent: ScopeName | None = None
    consistency: Consistency = CONSISTENCY_DEFAULT


class PopIn(Strict):
    workspace: ScopeName | None = None
    project: ScopeName | None = None
    message_id: MessageId | None = None
    agent: ScopeName | None = None
    request_id: RequestId | None = None


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


def _session(request: web.Request) -> str | None:
    return session_id(request)


async def start_session(request: web.Request) -> web.Response:
    node = request.app[NODE]
    body = await read_json(request, SessionIn)
    out = await mail.start_session(
        node, principal_of(request), workspace=body.workspace, project=body.project,
        harness=body.harness, session_id=body.session_id or uuid4(), owner_user=body.owner_user)
    return web.json_response(out, status=201)


async def list_projects(request: web.Request) -> web.Response:
    return web.json_response(await mail.list_projects(request.app[NODE], principal_of(request)))


async def send(request: web.Request) -> web.Response:
    node = request.app[NODE]
    body = await read_json(request, SendIn)
    principal = principal_of(request)
    out = await mail.send(
        node, principal, mail.SendRequest(**body.model_dump()), session_id=_session(request),
        owner_user=owner_user(principal),
        idempotency_key=check_idempotency_key(request.headers.get("Idempotency-Key")))
    return web.json_response(out, status=201)


async def list_messages(request: web.Request) -> web.Response:
    node = request.app[NODE]
    q = query_model(request, ListIn)
    out = await mail.list_box(node, principal_of(request), box=q.box, workspace=q.workspace,
                              project=q.project, session_id=_session(request), limit=q.limit,
                              agent=q.agent, consistency=q.consistency)
    return web.json_response(out)


async def pop(request: web.Request) -> web.Response:
    node = request.app[NODE]
    body = await read_json(request, PopIn)
    out = await mail.pop(node, principal_of(request), workspace=body.workspace,
                         project=body.project, session_id=_session(request),
                         message_id=body.message_id, agent=body.agent,
                         request_id=body.request_id)
    return web.json_response(out)


async def cancel(request: web.Request) -> web.Response:
    node = request.app[NODE]
    body = await read_json(request, CancelIn)
    out = await mail.cancel(node, principal_of(request), workspace=body.workspace,
                            project=body.project, session_id=_session(request),
                            message_id=body.message_id, cancel_all=body.all)
    return web.json_response(out)


async def handoff(request: web.Request) -> web.Response:
    node = request.app[NODE]
    q = query_model(request, ScopeQuery)
    out = await mail.handoff_notice(
        node, principal_of(request), workspace=q.workspace, project=q.project,
        session_id=_session(request), harness=q.harness,
        inbox_only=(q.inbox_only or "").lower() in ("1", "true", "yes"))
    return web.json_response(out)


async def briefing(request: web.Request) -> web.Response:
    node = request.app[NODE]
    q = query_model(request, ScopeQuery)
    out = await mail.briefing(node, principal_of(request), workspace=q.workspace, project=q.project,
                              session_id=_session(request))
    return web.json_response(out)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/sessions", start_session)
    app.router.add_get("/api/v1/projects", list_projects)
    app.router.add_post("/api/v1/messages", send)
    app.router.add_get("/api/v1/messages", list_messages)
    app.router.add_post("/api/v1/messages/pop", pop)
    app.router.add_post("/api/v1/messages/cancel", cancel)
    app.router.add_get("/api/v1/handoff", handoff)
    app.router.add_get("/handoff", handoff)  # where the source document's hooks fetch it
    app.router.add_get("/api/v1/briefing", briefing)
