"""``Webhooks``: the one object the rest of the daemon touches.

It owns the webhook database, the subscription registry and the
dispatcher, and offers what the HTTP handlers need (subscribe, list,
unsubscribe, dead letters and their replay) plus :meth:`Webhooks.on_applied`, the node's applied-ops
listener. The listener is registered when the node is built, before the
database is open: ops applied in that window are held (bounded like the
intake) and handed to the dispatcher at :meth:`start`.

Idempotent subscribe: with an ``Idempotency-Key`` the subscription id is
derived from (caller, key); a retry that asks for the same thing gets the
same subscription back, without its secret (a secret is shown once, in the
answer that created it: whoever replays a key learns nothing from it), a
retry that asks for something else is a 409.
"""

from __future__ import annotations

import random
from typing import Any

from common import limits
from common.errors import Conflict, LimitExceeded, NotFound, Unavailable
from common.ops import Op
from daemon.schemas.ids import record_id
from daemon.webhooks import lanes, outbox
from daemon.webhooks.config import WebhookSettings, side_db_path
from daemon.webhooks.db import WebhookDB
from daemon.webhooks.dispatcher import Dispatcher
from daemon.webhooks.registry import Registry, Subscription
from daemon.webhooks.signing import SIGNATURE_SECRET, new_secret
from daemon.webhooks.ssrf import Resolve, check_url, system_resolve


class Webhooks:
    def __init__(self, node: Any, *, settings: WebhookSettings | None = None,
                 resolve: Resolve = system_resolve, rng: random.Random | None = None) -> None:
        self.node = node
        self.settings = settings or node.settings.webhooks
        self.path = side_db_path(str(node.settings.store.db_path), self.settings)
        self._resolve = resolve
        self._rng = rng
        self._early: list[list[Op]] = []
        self._early_ops = 0
        self.db: WebhookDB | None = None
        self.registry: Registry | None = None
        self.dispatcher: Dispatcher | None = None

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        self.db = await WebhookDB.open(self.path)
        try:
            self.registry = Registry(self.db, limits.subscriptions_max)
            await self.registry.load()
            self.dispatcher = Dispatcher(
                self.db, self.registry, self.settings, self.node.metrics, self.node.node_id,
                self.node.now_ms, user_agent=f"ai-memory/{self.node.settings.version} webhooks",
                rng=self._rng)
            await self.dispatcher.start()
        except BaseException:
            await self.db.close()
            raise
        for ops in self._early:
            self.dispatcher.offer(ops)
        self._early.clear()
        dispatcher, registry = self.dispatcher, self.registry
        metrics = self.node.metrics
        metrics.gauge("webhook_outbox_pending", lambda: float(dispatcher.pending))
        metrics.gauge("webhook_outbox_dead", lambda: float(dispatcher.dead))
        metrics.gauge("webhook_subscriptions", lambda: float(len(registry)))

    async def stop(self) -> None:
        if self.dispatcher is not None:
            await self.dispatcher.stop()
            self.dispatcher = None
        if self.db is not None:
            await self.db.close()
            self.db = None

    def on_applied(self, ops: list[Op]) -> None:
        if self.dispatcher is not None:
            self.dispatcher.offer(ops)
        elif self._early_ops + len(ops) <= limits.webhook_intake_ops_max:
            self._early.append(list(ops))
            self._early_ops += len(ops)
        else:
            self.node.metrics.inc("webhook_dropped_total", len(ops), reason="intake_full")

    def _ready(self) -> tuple[Registry, Dispatcher]:
        if self.registry is None or self.dispatcher is None:
            raise Unavailable("webhooks are starting or stopping")
        return self.registry, self.dispatcher

    # -- what the handlers call ---------------------------------------------------
    async def subscribe(self, *, url: str, events: list[str] | tuple[str, ...],
                        namespace: str | None, secret: str | None, created_by: str | None,
                        idempotency_key: str | None = None, namespace_filter: str | None = None,
                        agent_filter: str | None = None,
                        signature_version: str = SIGNATURE_SECRET) -> dict[str, Any]:
        """Create a subscription; ``events`` as parsed by
        :func:`daemon.webhooks.names.parse_events` (empty: every event)."""
        registry, dispatcher = self._ready()
        sub_id = record_id("sub", created_by, idempotency_key)
        sub = Subscription(id=sub_id, url=url, events=tuple(dict.fromkeys(events)),
                           namespace=namespace, secret=secret or new_secret(),
                           created_at_ms=self.node.now_ms(), created_by=created_by,
                           namespace_filter=namespace_filter, agent_filter=agent_filter,
                           signature_version=signature_version)
        existing = registry.get(sub_id)
        if existing is not None:
            if existing.asks() != sub.asks() or (secret is not None and secret != existing.secret):
                raise Conflict("this Idempotency-Key already created a different subscription",
                               id=sub_id)
            return {**existing.public(), "replayed": True}
        await check_url(url, dispatcher.policy, self._resolve)
        await registry.add(sub)
        self.node.metrics.inc("webhook_subscriptions_created_total")
        out = sub.public()
        if secret is None:
            out["secret"] = sub.secret  # shown once: GET never returns it
        return out

    async def install(self, sub: Subscription) -> dict[str, Any]:
        """The row another lane of this node created, the same here
        (:mod:`daemon.webhooks.lanes`); already here as it is: nothing to do."""
        registry, _ = self._ready()
        existing = registry.get(sub.id)
        if existing is not None:
            if existing != sub:
                raise Conflict(f"lane holds a different subscription {sub.id}", id=sub.id)
            return {"installed": False}
        await registry.add(sub)
        self.node.metrics.inc("webhook_subscriptions_created_total")
        return {"installed": True}

    async def lane_call(self, call: dict[str, Any]) -> Any:
        """A sibling lane's call (``/lane/v1/webhooks``: :func:`daemon.webhooks.lanes.serve`)."""
        return await lanes.serve(self, call)

    def all(self) -> list[dict[str, Any]]:
        registry, _ = self._ready()
        return [s.public() for s in registry.all()]

    def creator(self, sub_id: str) -> str | None:
        """The agent that created subscription ``sub_id`` (404 if there is none)."""
        registry, _ = self._ready()
        sub = registry.get(sub_id)
        if sub is None:
            raise NotFound(f"subscription {sub_id} not found")
        return sub.created_by

    async def unsubscribe(self, sub_id: str) -> dict[str, Any]:
        registry, dispatcher = self._ready()
        dropped = await registry.remove(sub_id)
        if dropped is None:
            raise NotFound(f"subscription {sub_id} not found")
        pending, dead = dropped
        dispatcher.pending = max(0, dispatcher.pending - pending)
        dispatcher.dead = max(0, dispatcher.dead - dead)
        return {"deleted": True, "id": sub_id, "undelivered_dropped": pending}

    async def dead_letters(self, limit: int = 100) -> list[dict[str, object]]:
        if self.db is None:
            return []
        return await self.db.call(outbox.dead_letters, limit)

    async def dead_letter(self, ref: str) -> dict[str, object]:
        """One dead letter by delivery id or seq (404 if there is none)."""
        self._ready()
        assert self.db is not None
        row = await self.db.call(outbox.dead_letter, ref)
        if row is None:
            raise NotFound(f"dead letter {ref} not found")
        return row

    async def replay(self, ref: str) -> dict[str, object]:
        """Re-queue dead letter ``ref`` to the outbox (:func:`outbox.replay`)."""
        _, dispatcher = self._ready()
        assert self.db is not None
        if dispatcher.pending >= self.settings.outbox_max:
            raise LimitExceeded(f"the outbox already holds {dispatcher.pending} pending deliveries"
                                " (webhooks.outbox_max)", limit="outbox_max")
        out = await self.db.call(outbox.replay, ref, self.node.now_ms())
        if out is None:
            raise NotFound(f"dead letter {ref} not found")
        dispatcher.requeued()
        self.node.metrics.inc("webhook_replayed_total", event=str(out["event"]))
        return out
