"""The node's own MCP tools reach its services directly, in the caller's name.

``/mcp`` on a daemon runs the same tool table (:mod:`daemon.mcp.tools`) as
``ai-memory mcp`` over stdio. The stdio server hands each tool's request to
a node over HTTP (:class:`daemon.mcp.node_client.NodeClient`); here the same
request (method, path, query or JSON body, as the public API takes it) is
carried out in process by :class:`DirectClient`: validated with the very
models the HTTP handlers use (so a bad argument is the same
``{"error", "code"}`` body), the caller taken from the ``/mcp`` request's own
headers (``X-Agent-Id``, ``X-API-Key`` or a bearer key, the hook session in
``x-memory-actor-session-id``) exactly as :mod:`daemon.http.auth` reads them for
HTTP, then the service function called. Nothing goes back over a socket.

:data:`ROUTES` lists the requests the tools make; a tool asking for anything
else is a bug (a 500 naming the request).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from common import limits
from common.errors import ServerError, Unavailable
from common.policy import Principal, check_author
from daemon.api.mail import CancelIn, ListIn, PopIn, ScopeQuery, SendIn
from daemon.api.subscriptions import SubscribeIn, create_webhook
from daemon.http.appkeys import NODE
from daemon.http.auth import acting_agent, owner_user, principal_of
from daemon.node import Node
from daemon.schemas.agents import RegisterAgent
from daemon.schemas.headers import session_id
from daemon.schemas.ids import check_idempotency_key, check_record_id
from daemon.schemas.memories import CreateMemory, ListMemoriesQuery
from daemon.schemas.notify import InboxQuery, NotifyRequest
from daemon.schemas.search import SearchBody
from daemon.schemas.validation import validate
from daemon.services import agents, mail, memories, notify
from daemon.services import search as search_svc

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """One tool request, as the HTTP API would receive it."""

    request: web.Request  # the /mcp request: identity and session headers
    node: Node
    params: dict[str, Any]
    body: dict[str, Any]
    headers: Mapping[str, str]
    path_args: dict[str, str]

    @property
    def principal(self) -> Principal:
        """The caller, as the key middleware resolved the /mcp request."""
        return principal_of(self.request)

    def agent(self, claimed: str | None, *, required: bool) -> str | None:
        return acting_agent(self.principal, claimed, required=required)

    @property
    def session(self) -> str | None:
        return session_id(self.request)

    @property
    def idempotency_key(self) -> str | None:
        return check_idempotency_key(self.headers.get("Idempotency-Key"))


Route = Callable[[Call], Awaitable[Any]]


async def _notify(c: Call) -> Any:
    req = validate(NotifyRequest, c.body)
    sender = c.agent(req.agent_id, required=True)
    assert sender is not None
    return await notify.notify(c.node, req, sender=sender, idempotency_key=c.idempotency_key)


async def _inbox(c: Call) -> Any:
    q = validate(InboxQuery, c.params)
    agent = c.agent(q.agent_id, required=True)
    assert agent is not None
    return await notify.inbox(c.node, q, agent=agent)


async def _send(c: Call) -> Any:
    body = validate(SendIn, c.body)
    principal = c.principal
    return await mail.send(
        c.node, principal, mail.SendRequest(**body.model_dump()), session_id=c.session,
        owner_user=owner_user(principal), idempotency_key=c.idempotency_key)


async def _list(c: Call) -> Any:
    q = validate(ListIn, c.params)
    return await mail.list_box(c.node, c.principal, box=q.box, workspace=q.workspace,
                               project=q.project, session_id=c.session, limit=q.limit,
                               agent=q.agent, consistency=q.consistency)


async def _pop(c: Call) -> Any:
    body = validate(PopIn, c.body)
    return await mail.pop(c.node, c.principal, workspace=body.workspace, project=body.project,
                          session_id=c.session, message_id=body.message_id, agent=body.agent,
                          request_id=body.request_id)


async def _cancel(c: Call) -> Any:
    body = validate(CancelIn, c.body)
    return await mail.cancel(c.node, c.principal, workspace=body.workspace,
                             project=body.project, session_id=c.session,
                             message_id=body.message_id, cancel_all=body.all)


async def _briefing(c: Call) -> Any:
    q = validate(ScopeQuery, c.params)
    return await mail.briefing(c.node, c.principal, workspace=q.workspace, project=q.project,
                               session_id=c.session)


async def _handoff(c: Call) -> Any:
    q = validate(ScopeQuery, c.params)
    return await mail.handoff_notice(c.node, c.principal, workspace=q.workspace,
                                     project=q.project, session_id=c.session,
                                     harness=q.harness)


async def _subscribe(c: Call) -> Any:
    body = validate(SubscribeIn, c.body)
    agent = c.agent(body.agent_id, required=False)
    return await create_webhook(c.node, body, agent, c.idempotency_key)


async def _subscriptions(c: Call) -> Any:
    subs = c.node.webhooks.all()
    return {"subscriptions": subs, "count": len(subs)}


async def _unsubscribe(c: Call) -> Any:
    sub_id = check_record_id(c.path_args["id"], "subscription id")
    check_author(c.principal, c.node.webhooks.creator(sub_id), "subscription.delete")
    return await c.node.webhooks.unsubscribe(sub_id)


async def _register(c: Call) -> Any:
    req = validate(RegisterAgent, c.body)
    if c.principal.agent_bound:
        acting_agent(c.principal, req.agent_id)
    return await agents.register(c.node, req)


async def _agents(c: Call) -> Any:
    return await agents.list_agents(c.node)


async def _store(c: Call) -> Any:
    req = validate(CreateMemory, c.body)
    agent = c.agent(req.agent_id, required=False)
    return await memories.create(c.node, req, agent=agent, idempotency_key=c.idempotency_key)


async def _memories(c: Call) -> Any:
    return await memories.list_memories(c.node, validate(ListMemoriesQuery, c.params))


async def _memory(c: Call) -> Any:
    return await memories.get(c.node, c.path_args["id"])


async def _delete(c: Call) -> Any:
    return await memories.delete(c.node, c.path_args["id"], principal=c.principal)


async def _search(c: Call) -> Any:
    return await search_svc.search(c.node, validate(SearchBody, c.body))


ROUTES: list[tuple[str, str, Route]] = [
    ("POST", "/api/v1/notify", _notify),
    ("GET", "/api/v1/inbox", _inbox),
    ("POST", "/api/v1/messages", _send),
    ("GET", "/api/v1/messages", _list),
    ("POST", "/api/v1/messages/pop", _pop),
    ("POST", "/api/v1/messages/cancel", _cancel),
    ("GET", "/api/v1/briefing", _briefing),
    ("GET", "/api/v1/handoff", _handoff),
    ("POST", "/api/v1/subscriptions", _subscribe),
    ("GET", "/api/v1/subscriptions", _subscriptions),
    ("DELETE", "/api/v1/subscriptions/{id}", _unsubscribe),
    ("POST", "/api/v1/agents", _register),
    ("GET", "/api/v1/agents", _agents),
    ("POST", "/api/v1/memories", _store),
    ("GET", "/api/v1/memories", _memories),
    ("GET", "/api/v1/memories/{id}", _memory),
    ("DELETE", "/api/v1/memories/{id}", _delete),
    ("POST", "/api/v1/search", _search),
]
_COMPILED = [(method, re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$"), fn)
             for method, path, fn in ROUTES]


class DirectClient:
    """The tools' node client for ``/mcp``: the requests carried out in this process."""

    def __init__(self, request: web.Request) -> None:
        self.http_request = request
        self.node: Node = request.app[NODE]

    async def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                       json_body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        for m, pattern, fn in _COMPILED:
            found = pattern.match(path) if m == method else None
            if found is not None:
                call = Call(self.http_request, self.node,
                            {k: v for k, v in (params or {}).items() if v is not None},
                            dict(json_body or {}), dict(headers or {}), found.groupdict())
                return await fn(call)
        raise ServerError(f"the MCP tools asked for {method} {path}, which /mcp does not serve")

    async def get(self, path: str, **params: Any) -> Any:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: Mapping[str, Any], *,
                   headers: Mapping[str, str] | None = None) -> Any:
        return await self.request("POST", path, json_body=dict(body), headers=headers)

    async def delete(self, path: str) -> Any:
        return await self.request("DELETE", path)

    async def retrying_once(self, call: Callable[[], Awaitable[T]]) -> T:
        """As over HTTP: after a 503 (a quorum not met in time) once more, same keys."""
        try:
            return await call()
        except Unavailable as exc:
            await asyncio.sleep(min(exc.retry_after, limits.mcp_retry_wait_max_secs))
        return await call()
