"""The dispatcher: two loops between applied ops and receivers.

``offer(ops)`` is the node's applied-ops listener. It runs inside the
node's effect loop, so it only filters and queues (bounded by
``limits.webhook_intake_ops_max``; overflow is refused, counted in
``webhook_dropped_total`` and logged). The **intake loop** drains that queue into the outbox in one
transaction per batch (:func:`daemon.webhooks.intake.admit`) and wakes the
**delivery loop**, which reads the head row of every subscription, starts
a POST for each one that is due (at most ``concurrency`` at a time, one per
subscription), and otherwise sleeps until the earliest ``next_at_ms`` or
until woken by new rows or a finished delivery.

A POST is signed (:mod:`daemon.webhooks.signing`), goes through the SSRF
guard's resolver, never follows redirects and is bounded by
``timeout_secs``. A 2xx deletes the row; anything else reschedules it with
capped, jittered backoff or, after ``retry_max`` attempts, dead-letters it.

Shutdown: cancel deliveries in flight (their rows stay pending and are sent
again after restart -- at-least-once), finish admitting whatever the
intake queue holds, close the HTTP session.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from common import limits
from common.errors import BadRequest
from common.ops import Op
from daemon.webhooks import intake, outbox
from daemon.webhooks.config import WebhookSettings
from daemon.webhooks.db import WebhookDB
from daemon.webhooks.events import EVENT_KINDS, MEMORY_KINDS
from daemon.webhooks.registry import Registry, Subscription
from daemon.webhooks.signing import delivery_headers
from daemon.webhooks.ssrf import AddressPolicy, GuardedResolver, RefusedAddress, check_literal

log = logging.getLogger("ai_memory.webhooks")

INTAKE_BATCH_OPS = limits.webhook_intake_batch_ops
BURST_ROWS = limits.webhook_burst_rows
ERROR_PAUSE_SECS = limits.webhook_error_pause_secs
_ERROR_TEXT_MAX = limits.webhook_error_text_max_chars


class Dispatcher:
    def __init__(self, db: WebhookDB, registry: Registry, settings: WebhookSettings,
                 metrics: Any, node_id: str, now_ms: Callable[[], int], *,
                 user_agent: str, rng: random.Random | None = None,
                 intake_ops_max: int = limits.webhook_intake_ops_max) -> None:
        self.db = db
        self.registry = registry
        self.settings = settings
        self.metrics = metrics
        self.node_id = node_id
        self.now_ms = now_ms
        self.policy = AddressPolicy(settings.allow_loopback_webhooks,
                                    settings.allow_private_webhooks)
        self._user_agent = user_agent
        self._rng = rng or random.Random()
        self._intake_max = intake_ops_max
        self._intake: collections.deque[list[Op]] = collections.deque()
        self._intake_ops = 0
        self._intake_ready = asyncio.Event()
        self._overflowing = False
        self._wake = asyncio.Event()
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self.pending = 0
        self.dead = 0

    # -- lifecycle ------------------------------------------------------------------
    async def recount(self) -> None:
        """Read the pending / dead counts from the database (at start); from
        then on they are kept exactly by the deltas of every outbox change,
        all of which go through this object."""
        self.pending = await self.db.call(outbox.pending_count)
        self.dead = await self.db.call(outbox.dead_count)

    async def start(self) -> None:
        await self.recount()
        connector = aiohttp.TCPConnector(resolver=GuardedResolver(self.policy),
                                         limit=self.settings.concurrency, use_dns_cache=False)
        self._session = aiohttp.ClientSession(
            connector=connector, trust_env=False,
            timeout=aiohttp.ClientTimeout(total=self.settings.timeout_secs))
        self._loops = [asyncio.create_task(self._intake_loop(), name="webhook-intake"),
                       asyncio.create_task(self._delivery_loop(), name="webhook-delivery"),
                       asyncio.create_task(self._prune_loop(), name="webhook-prune")]
        if self.pending:
            log.info("webhooks: %d pending deliveries in the outbox", self.pending)

    async def stop(self) -> None:
        for task in [*self._loops, *self._inflight.values()]:
            task.cancel()
        for task in [*self._loops, *self._inflight.values()]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._loops.clear()
        self._inflight.clear()
        await self.drain_intake()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- intake ---------------------------------------------------------------------
    def offer(self, ops: list[Op]) -> None:
        """Applied-ops listener: keep the ops that can matter, never block."""
        subscribed = len(self.registry) > 0
        keep = [op for op in ops
                if op.kind in EVENT_KINDS and (subscribed or op.kind in MEMORY_KINDS)]
        if not keep:
            return
        if self._intake_ops + len(keep) > self._intake_max:
            self.metrics.inc("webhook_dropped_total", len(keep), reason="intake_full")
            if not self._overflowing:
                log.error("webhooks: intake queue full (%d ops, limits.webhook_intake_ops_max); "
                          "dropping events until it drains", self._intake_ops)
            self._overflowing = True
            return
        self._overflowing = False
        self._intake.append(keep)
        self._intake_ops += len(keep)
        self._intake_ready.set()

    def _take_batch(self) -> list[Op]:
        batch: list[Op] = []
        while self._intake and len(batch) < INTAKE_BATCH_OPS:
            ops = self._intake.popleft()
            self._intake_ops -= len(ops)
            batch.extend(ops)
        return batch

    async def drain_intake(self) -> None:
        """Admit everything queued so far (also used at shutdown and by tests)."""
        while self._intake:
            await self._admit(self._take_batch())

    async def _intake_loop(self) -> None:
        while True:
            await self._intake_ready.wait()
            self._intake_ready.clear()
            await self.drain_intake()

    async def _admit(self, ops: list[Op]) -> None:
        try:
            res = await self.db.call(intake.admit, ops, self.registry.all(), self.node_id,
                                     self.now_ms(), self.settings.outbox_max - self.pending)
        except Exception:
            log.exception("webhooks: could not write %d ops' events to the outbox", len(ops))
            self.metrics.inc("webhook_dropped_total", len(ops), reason="intake_error")
            return
        for event, n in res.enqueued.items():
            self.metrics.inc("webhook_enqueued_total", n, event=event)
        for event, n in res.dropped.items():
            self.metrics.inc("webhook_dropped_total", n, reason="outbox_full", event=event)
        self.pending += sum(res.enqueued.values())
        if res.dropped:
            log.error("webhooks: outbox full (%d pending, limits.webhook_outbox_max); "
                      "refused %d deliveries", self.pending, sum(res.dropped.values()))
        if res.enqueued:
            self._wake.set()

    def requeued(self) -> None:
        """A dead row went back to pending (:meth:`Webhooks.replay`): count it, wake the loop."""
        self.pending += 1
        self.dead = max(0, self.dead - 1)
        self._wake.set()

    async def _prune_loop(self) -> None:
        while True:
            await asyncio.sleep(limits.webhook_versions_prune_secs)
            try:
                await self.db.call(intake.prune_versions, self.now_ms())
            except Exception:
                log.exception("webhooks: pruning expired memory versions failed")

    # -- delivery -------------------------------------------------------------------
    async def _delivery_loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                heads = await self.db.call(outbox.heads)
            except Exception:
                log.exception("webhooks: reading the outbox failed")
                await asyncio.sleep(ERROR_PAUSE_SECS)
                continue
            now = self.now_ms()
            next_at: int | None = None
            for head in heads:
                if head.sub_id in self._inflight:
                    continue
                if head.next_at_ms > now:
                    next_at = head.next_at_ms if next_at is None else min(next_at, head.next_at_ms)
                elif len(self._inflight) < self.settings.concurrency:
                    self._inflight[head.sub_id] = asyncio.create_task(
                        self._deliver(head), name=f"webhook-{head.seq}")
            timeout = None if next_at is None else max(0.0, (next_at - now) / 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _deliver(self, head: outbox.Head) -> None:
        """Deliver a subscription's rows in order while they succeed and are
        due (up to ``BURST_ROWS``, then the slot goes back to the loop)."""
        try:
            row = await self.db.call(outbox.fetch, head.seq)
            for _ in range(BURST_ROWS):
                if row is None:
                    return
                sub = self.registry.get(row.sub_id)
                if sub is None:  # deleted meanwhile; its rows are being removed with it
                    return
                started = time.perf_counter()
                reason, error = await self._post(sub, row)
                self.metrics.observe("webhook_delivery_seconds", time.perf_counter() - started)
                if reason is not None:
                    await self._failed(row, reason, error)
                    return
                found, row_next = await self.db.call(outbox.delivered_then_next, row.seq,
                                                     row.sub_id, self.now_ms())
                if found:
                    self.pending = max(0, self.pending - 1)
                self.metrics.inc("webhook_delivered_total", event=row.event)
                row = row_next
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("webhooks: delivery of outbox row %d failed unexpectedly", head.seq)
            await asyncio.sleep(ERROR_PAUSE_SECS)
        finally:
            self._inflight.pop(head.sub_id, None)
            self._wake.set()

    async def _post(self, sub: Subscription, row: outbox.Row) -> tuple[str | None, str]:
        """One attempt. Returns ``(None, "")`` on a 2xx, else (reason class, detail)."""
        try:
            check_literal(sub.url, self.policy)
        except BadRequest as exc:
            return "refused", exc.message
        assert self._session is not None
        headers = delivery_headers(sub.secret, row.body, event=row.event,
                                   delivery_id=row.delivery_id, now_ms=self.now_ms(),
                                   user_agent=self._user_agent, version=sub.signature_version)
        try:
            async with self._session.post(sub.url, data=row.body, headers=headers,
                                          allow_redirects=False) as resp:
                status = resp.status
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, RefusedAddress):
                return "refused", str(exc.os_error)
            return "connect", str(exc)
        except TimeoutError:
            return "timeout", f"no response within {self.settings.timeout_secs}s"
        except aiohttp.ClientError as exc:
            return "transport", f"{type(exc).__name__}: {exc}"
        if 200 <= status < 300:
            return None, ""
        return "status", f"HTTP {status}"

    async def _failed(self, row: outbox.Row, reason: str, error: str) -> None:
        attempts = row.attempts + 1
        error = error[:_ERROR_TEXT_MAX]
        self.metrics.inc("webhook_attempt_failures_total", reason=reason)
        if attempts >= self.settings.retry_max:
            found, purged = await self.db.call(outbox.bury, row.seq, attempts, error,
                                               self.settings.dead_letter_max)
            if found:
                self.pending = max(0, self.pending - 1)
                self.dead = self.dead + 1 - purged
                self.metrics.inc("webhook_dead_lettered_total", event=row.event)
                log.warning("webhooks: gave up on delivery %s (%s to subscription %s) after %d "
                            "attempts: %s", row.delivery_id, row.event, row.sub_id, attempts, error)
            if purged:
                self.metrics.inc("webhook_dead_letters_purged_total", purged)
                log.warning("webhooks: purged %d oldest dead letters "
                            "(limits.webhook_dead_letter_max)", purged)
            return
        delay = outbox.retry_delay_secs(attempts, self.settings.backoff_base_secs,
                                        self.settings.backoff_max_secs, self._rng)
        await self.db.call(outbox.reschedule, row.seq, attempts,
                           self.now_ms() + int(delay * 1000), error)
