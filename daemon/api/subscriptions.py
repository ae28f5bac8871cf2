"""The operations of ``/api/v1/subscriptions`` and the webhook wiring.

The node's :class:`daemon.webhooks.service.Webhooks` is built, registered
as an applied-ops listener and started with the node
(:func:`daemon.wiring.build_node`). Subscriptions belong to this daemon: they
are not replicated, but the events they receive come from every op this
node applies, including ops replicated from peers.

Bodies are validated completely before anything is written: an unknown
event name, a hostile or unresolvable URL, a bad namespace, filter or
secret is a 400 and leaves no row behind.

Upstream's wire shapes are accepted as they are sent: ``events`` as a list,
``"*"`` or a comma-separated string, upstream's event names
(:mod:`daemon.webhooks.names`), its ``event_types`` list, and its exact
``namespace_filter`` and ``agent_filter`` (an empty string there means no
filter, as upstream reads it). ``signature_version`` picks what
``X-AI-Memory-Signature`` carries (:mod:`daemon.webhooks.signing`).
``DELETE /subscriptions?id=`` is the same as ``DELETE /subscriptions/{id}``.

Dead letters are listed (``GET /subscriptions/dead-letters``) and put back
in the outbox one at a time (``POST /subscriptions/dead-letters/{id}/replay``,
``id`` the delivery id or the row's seq; on a node with lanes, the row's
``ref``, ``<lane>:<seq>``) by the subscription's creator or root. With
lanes every subscription is on every lane (:mod:`daemon.webhooks.lanes`).

Upstream's namespace shape shares the path: a body ``{"agent_id",
"namespace"}`` without ``url`` subscribes an agent to a namespace,
``GET ?agent_id=`` lists that agent's namespaces and ``DELETE
?agent_id=&namespace=`` removes one (:mod:`daemon.services.ns_subscriptions`;
those are replicated records, unlike webhook subscriptions).

A webhook's secret is in the answer that created it and nowhere else (an
idempotent replay of the create answers without it). Only the agent that
created a subscription (a key bound to it) or root deletes it
(:func:`common.policy.check_author`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import BeforeValidator, Field, StringConstraints, model_validator

from common import limits
from common.errors import BadRequest
from common.policy import check_author
from daemon.api.call import ApiCall, Route, serve
from daemon.http.auth import acting_agent
from daemon.schemas.ids import check_record_id
from daemon.schemas.timefmt import rfc3339
from daemon.schemas.validation import AgentId, Lenient, Namespace, Strict, text, validate
from daemon.services import ns_subscriptions
from daemon.webhooks import lanes as webhook_lanes
from daemon.webhooks.names import parse_events
from daemon.webhooks.outbox import is_seq
from daemon.webhooks.signing import SIGNATURE_SECRET, SignatureVersion


def _event_types(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ValueError("event_types must be a non-empty list of event names")
    return parse_events(value)


def _blank_is_none(value: object) -> object:
    return None if value == "" else value


EventSet = Annotated[tuple[str, ...], BeforeValidator(parse_events)]


class SubscribeIn(Strict):
    url: Annotated[str, StringConstraints(min_length=1, max_length=limits.webhook_url_max_chars)]
    events: EventSet = ()
    event_types: Annotated[tuple[str, ...] | None, BeforeValidator(_event_types)] = None
    namespace: Namespace | None = None
    namespace_filter: Annotated[Namespace | None, BeforeValidator(_blank_is_none)] = None
    agent_filter: Annotated[AgentId | None, BeforeValidator(_blank_is_none)] = None
    signature_version: SignatureVersion = SIGNATURE_SECRET
    secret: text(limits.webhook_secret_max_chars, min_chars=1) | None = None  # type: ignore[valid-type]
    agent_id: AgentId | None = None

    @model_validator(mode="after")
    def _one_event_set(self) -> SubscribeIn:
        if self.event_types is not None:
            if "events" in self.model_fields_set and self.events != self.event_types:
                raise ValueError("events and event_types name different events; send one")
            self.events = self.event_types
        return self


async def create_webhook(node: Any, body: SubscribeIn, agent: str | None,
                         key: str | None) -> dict[str, Any]:
    """The create both ``POST /subscriptions`` and MCP's memory_subscribe make."""
    out: dict[str, Any] = await node.webhooks.subscribe(
        url=body.url, events=body.events, namespace=body.namespace, secret=body.secret,
        created_by=agent, idempotency_key=key, namespace_filter=body.namespace_filter,
        agent_filter=body.agent_filter, signature_version=body.signature_version)
    return await webhook_lanes.installed(node, out)  # and on every other lane of the node


class NamespaceSubscribeIn(Strict):
    agent_id: AgentId
    namespace: Namespace


class NamespaceQuery(Lenient):
    agent_id: AgentId
    namespace: Namespace | None = None
    consistency: Literal["quorum", "local"] = "quorum"


async def subscribe(c: ApiCall) -> Any:
    key = c.idempotency_key
    data = await c.read()
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    if "url" not in data and "namespace" in data and "agent_id" in data:
        ns_req = validate(NamespaceSubscribeIn, data)
        who = c.agent(ns_req.agent_id)
        assert who is not None
        return await ns_subscriptions.subscribe(c.node, who, ns_req.namespace)
    body = validate(SubscribeIn, data)
    agent = c.agent(body.agent_id, required=False)
    return await create_webhook(c.node, body, agent, key)


async def list_subscriptions(c: ApiCall) -> Any:
    who = c.principal
    if "agent_id" in c.query:  # upstream's namespace shape
        q = c.params(NamespaceQuery)
        agent = acting_agent(who, q.agent_id)
        assert agent is not None
        return await ns_subscriptions.list_for(c.node, agent, q.consistency)
    subs = c.node.webhooks.all()
    return {"subscriptions": subs, "count": len(subs)}


async def _unsubscribe(c: ApiCall, raw_id: str) -> Any:
    principal = c.principal
    sub_id = check_record_id(raw_id, "subscription id")
    check_author(principal, c.node.webhooks.creator(sub_id), "subscription.delete")
    return await webhook_lanes.unsubscribe(c.node, sub_id)


async def unsubscribe(c: ApiCall) -> Any:
    return await _unsubscribe(c, c.path["sub_id"])


class DeadLettersQuery(Lenient):
    limit: Annotated[int, Field(ge=1, le=limits.webhook_dead_letter_max)] = 100


async def dead_letters(c: ApiCall) -> Any:
    """Deliveries that exhausted their retries (kept up to
    limits.webhook_dead_letter_max, oldest first), for an operator to inspect."""
    c.principal  # noqa: B018 - a route that resolves no caller refuses here
    q = c.params(DeadLettersQuery)
    rows = [{**{k: v for k, v in row.items() if k != "created_at_ms"},
             "created_at": rfc3339(int(str(row["created_at_ms"])))}
            for row in await webhook_lanes.dead_letters(c.node, q.limit)]
    return {"dead_letters": rows, "count": len(rows)}


async def replay_dead_letter(c: ApiCall) -> Any:
    """Put one dead letter back in the outbox, to be tried afresh."""
    principal = c.principal
    ref = c.path["ref"]
    if not is_seq(ref) and ":" not in ref:
        ref = check_record_id(ref, "dead letter id")
    lane, ref, row = await webhook_lanes.find_dead(c.node, ref)
    check_author(principal, c.node.webhooks.creator(str(row["sub_id"])), "subscription.replay")
    return await webhook_lanes.replay(c.node, lane, ref)


async def unsubscribe_namespace(c: ApiCall) -> Any:
    if "id" in c.query and "agent_id" not in c.query:  # the newer SDK's shape
        return await _unsubscribe(c, c.query["id"])
    q = c.params(NamespaceQuery)
    if q.namespace is None:
        raise BadRequest("DELETE /subscriptions takes agent_id and namespace, or id "
                         "(or use DELETE /subscriptions/{id} for a webhook)")
    agent = c.agent(q.agent_id)
    assert agent is not None
    return await ns_subscriptions.unsubscribe(c.node, agent, q.namespace)


OPERATIONS = [
    Route("POST", "/api/v1/subscriptions", subscribe, 201),
    Route("GET", "/api/v1/subscriptions", list_subscriptions),
    Route("GET", "/api/v1/subscriptions/dead-letters", dead_letters),
    Route("POST", "/api/v1/subscriptions/dead-letters/{ref}/replay", replay_dead_letter),
    Route("DELETE", "/api/v1/subscriptions/{sub_id}", unsubscribe),
    Route("DELETE", "/api/v1/subscriptions", unsubscribe_namespace),
]


def add_routes(app: web.Application) -> None:
    serve(app, OPERATIONS)
