"""Before a member with no database serves: ask the others, wait, then
bootstrap with them or be seeded from one of them.

:func:`prepare` runs in ``serve`` before the node is built. A member with a
database, a single node, and ``--initial-cluster-state new`` pass straight
through. Any other member without data:

1. listens at once on its own address with a small app of its own
   (:func:`_waiting_app`): ``GET /api/v1/health`` answers 503 with
   ``"state": "waiting_for_peers"``, what it waits for and why;
   ``POST /peer/v1/hello`` (signed like every peer request) tells a peer
   that it is waiting too; every other request gets 503 and ``Retry-After``;
2. probes every other member (``/peer/v1/hello``; a serving member answers
   from :func:`daemon.api.peer.hello`, and an older build, which does not
   know the path, with 404, which means it serves a database) and asks
   :func:`federation.bootstrap.decide` what to do;
3. waits and probes again, after 0.2 s doubling up to
   ``limits.join_retry_max_secs`` (with jitter), for as long as it takes:
   it never exits because peers are not up yet. The wait is logged when it
   changes and every ``limits.join_log_every_secs``, and under systemd each
   round extends the start timeout (``EXTEND_TIMEOUT_USEC``) and sets STATUS;
4. on ``Seed`` downloads a donor's copy (:mod:`daemon.replication.seeding`); a donor
   that fails sends it back to waiting. On ``Bootstrap`` it returns
   settings whose ``initial_state`` is ``new`` and whose cluster id is the
   agreed one. On ``Refuse`` it raises :class:`ClusterMismatch`.

The waiting app is closed before the node's own app listens, so a peer
that probes in between finds nothing listening and probes again. Each of its
answers closes the connection, so no client keeps talking to it after the
node serves.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
from aiohttp import web

from common import limits
from common.errors import AiMemoryError, ClusterMismatch, Unavailable
from common.lanes import PARTITION_VERSION, lanes_of_cluster_id, partition_of_cluster_id
from daemon.http.errors import refuse_unread
from daemon.http.jsonio import json_response
from daemon.peer.auth import BOOT_HEADER, BootMismatch, Verifier
from daemon.peer.client import PeerClient, PeerUnreachable
from daemon.replication.seeding import announce, seed_from_peers
from daemon.runtime import tls
from daemon.runtime.systemd import Notifier
from daemon.runtime.tls import check_peer_cert
from daemon.settings import Settings
from federation import bootstrap as rule
from store.db import copy_to_recover, holds_data

log = logging.getLogger("ai_memory.node")

HELLO_PATH = "/peer/v1/hello"
WAITING_STATE = "waiting_for_peers"


def hello_answer(state: str, node_id: str, cluster_id: str, fresh: bool = False,
                 collected: dict[str, int] | None = None) -> dict[str, Any]:
    """What ``/peer/v1/hello`` answers, waiting or serving (``fresh``: a
    database with nothing of other members, :attr:`NodeCore.pristine`;
    ``collected``: per origin, the seq its op log was collected up to,
    :meth:`store.db.Store.collected_floor`)."""
    out: dict[str, Any] = {"node_id": node_id, "state": state, "cluster_id": cluster_id,
                           "fresh": fresh}
    if collected is not None:
        out["collected"] = collected
    return out


def _collected(raw: Any) -> dict[str, int] | None:
    """A hello's ``collected`` map, or None if absent or malformed."""
    if not (isinstance(raw, dict) and len(raw) <= limits.hello_collected_origins_max
            and all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in raw.items())):
        return None
    return dict(raw)


def needs_join(settings: Settings) -> bool:
    c = settings.cluster
    return bool(c.peers) and c.initial_state != "new" and not holds_data(settings.store.db_path)


class _Waiting:
    """What the waiting app shows: the last decision's reason."""

    def __init__(self, settings: Settings, state: str = rule.WAITING) -> None:
        self.settings = settings
        self.state = state  # what its hello answers: WAITING, or CHECKING a copy
        self.reason = "asking the other members what they hold"
        self.waiting_for: tuple[str, ...] = tuple(p.node_id for p in settings.cluster.peers)
        self.since = time.time()
        self.verifier = Verifier(settings.cluster.secret, settings.cluster.node_id)
        # Set by the hello of a member the last probe could not reach: it
        # has just started, so what the members hold may have changed; the
        # probe loop, backed off to seconds, asks again at once instead of
        # after its delay. (A member that answered already tells nothing new:
        # two members waiting for a third do not wake each other in a loop.)
        self.asked = asyncio.Event()
        self.silent: set[str] = set()  # the members the last probe had no answer from

    async def pause(self, secs: float) -> bool:
        """Sleep ``secs``, or less if a member says hello; True if one did."""
        try:
            await asyncio.wait_for(self.asked.wait(), secs)
        except TimeoutError:
            return False
        self.asked.clear()
        return True

    def now_s(self) -> float:
        return time.time() + self.settings.clock_offset_ms / 1000


def _waiting_app(w: _Waiting) -> web.Application:
    c = w.settings.cluster

    async def health(request: web.Request) -> web.Response:
        return json_response({
            "status": "starting", "state": WAITING_STATE, "service": "ai-memory",
            "version": w.settings.version, "node_id": c.node_id,
            "federation_enabled": True, "recovering": False,
            "waiting_for": list(w.waiting_for), "detail": w.reason,
            "waiting_secs": round(time.time() - w.since, 1),
        }, status=503, headers={"Retry-After": "1"})

    async def hello(request: web.Request) -> web.StreamResponse:
        try:
            checked = w.verifier.verify_headers(request.headers, request.method, request.path,
                                                request.content_length, w.now_s())
            if checked.node not in c.member_ids or checked.node == c.node_id:
                return await refuse_unread(request, ClusterMismatch(
                    f"{checked.node!r} is not a member of this cluster"))
            check_peer_cert(w.settings, request.transport, checked.node)
            w.verifier.check_body(checked, await request.read())
        except AiMemoryError as exc:
            extra = {BOOT_HEADER: w.verifier.boot} if isinstance(exc, BootMismatch) else {}
            return await refuse_unread(request, exc, extra)
        body = msgpack.packb(hello_answer(w.state, c.node_id, c.cluster_id),
                             use_bin_type=True)
        if checked.node in w.silent:
            w.silent.discard(checked.node)
            w.asked.set()
        return web.Response(body=body, content_type="application/msgpack")

    async def starting(request: web.Request) -> web.Response:
        return json_response(
            {"error": f"this member is starting: {w.reason}", "code": "starting",
             "state": WAITING_STATE}, status=503, headers={"Retry-After": "1"})

    async def one_answer_per_connection(request: web.Request,
                                        response: web.StreamResponse) -> None:
        # Every answer closes its connection. A TLS connection this app
        # accepted whose handshake ends after the app closed is still served
        # by it (aiohttp counts a connection only once its handshake is done,
        # so the close never sees it); kept alive, a client polling health
        # would be told "waiting" for ever while the node serves beside it.
        response.force_close()
        response.headers["Connection"] = "close"

    app = web.Application(client_max_size=limits.request_body_max_bytes)
    app.on_response_prepare.append(one_answer_per_connection)
    app.router.add_get("/api/v1/health", health)
    app.router.add_post(HELLO_PATH, hello)
    app.router.add_route("*", "/{tail:.*}", starting)
    return app


async def _probe(peers: PeerClient, peer: str) -> rule.PeerView:
    try:
        answer = await peers.call(peer, HELLO_PATH, {}, timeout_s=limits.join_probe_timeout_secs)
    except PeerUnreachable as exc:
        if exc.reason == "rejected (404)":
            # A build from before this probe: it serves a database.
            return rule.PeerView(peer, True, rule.SERVING)
        return rule.PeerView(peer, False, why=exc.reason)
    if not isinstance(answer, dict) or answer.get("state") not in (rule.WAITING, rule.SERVING,
                                                                   rule.CHECKING):
        return rule.PeerView(peer, False, why=f"odd answer {str(answer)[:80]}")
    cluster_id = str(answer.get("cluster_id") or "")[:limits.lane_cluster_id_max_chars]
    return rule.PeerView(peer, True, str(answer["state"]), cluster_id=cluster_id,
                         fresh=answer.get("fresh") is True,
                         collected=_collected(answer.get("collected")))


async def probe_all(peers: PeerClient, settings: Settings) -> list[rule.PeerView]:
    return list(await asyncio.gather(*(_probe(peers, p.node_id)
                                       for p in settings.cluster.peers)))


def check_lane_count(views: list[rule.PeerView], lanes: int) -> None:
    """Refuse to join (or be seeded by) members that run another lane count:
    each lane's cluster id names the count (``<id>.lane<i>of<L>``), and a
    member without lanes reaching a laned one lands on one of its lanes."""
    for v in views:
        theirs = lanes_of_cluster_id(v.cluster_id) if v.answered else None
        if theirs is not None and theirs != lanes:
            raise ClusterMismatch(
                f"{v.node_id} runs {theirs} lane{'s' if theirs != 1 else ''} and this member "
                f"{lanes}: every member of a cluster runs the same lane count (--lanes; "
                "docs/lanes.md)")
        rule_of = partition_of_cluster_id(v.cluster_id) if v.answered else None
        if lanes > 1 and rule_of is not None and rule_of != PARTITION_VERSION:
            raise ClusterMismatch(
                f"{v.node_id} places keys on its lanes by partition rule {rule_of} and this "
                f"member by rule {PARTITION_VERSION}: every member of a laned cluster runs "
                "one rule (docs/lanes.md, \"Memories over the lanes\")")


async def _check_copy(peers: PeerClient, settings: Settings, copy_vv: dict[str, int],
                      waiting: _Waiting) -> rule.KeepCopy | rule.SetAside | rule.Wait:
    """One round for a database that must still recover (restored, or seeded
    and not yet recovered): ``Reseeding`` to every member first, so that those
    that take it collect nothing more over this member until it has
    recovered, then ``/peer/v1/hello`` for what each has collected, and
    :func:`federation.bootstrap.decide_copy`. Anti-entropy streams only
    logged ops: a copy that lacks ops every such member has collected could
    never catch up."""
    took = await announce(peers, settings, donor="", timeout_s=limits.join_probe_timeout_secs)
    views = await probe_all(peers, settings)
    check_lane_count(views, settings.server.lanes)
    waiting.silent = {v.node_id for v in views if not v.answered}
    return rule.decide_copy(copy_vv, views, took)


def _set_aside(settings: Settings, lost: dict[str, tuple[int, int]]) -> Path:
    """Rename the database ``<db>.too-old-<UTC time>`` (kept for the operator)."""
    db = Path(settings.store.db_path)
    aside = db.with_name(f"{db.name}.too-old-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    for suffix in ("-wal", "-shm", ""):  # the main file last
        part = Path(f"{db}{suffix}")
        if part.exists():
            part.rename(f"{aside}{suffix}")
    log.warning("this member's database lacks ops that every other member has already "
                "collected from its log (%s), so it could never catch up: moved it to %s; "
                "the member starts as one that lost its disk, from a member's copy",
                ", ".join(f"{o} {have + 1}..{floor}" for o, (have, floor) in lost.items()),
                aside)
    return aside


async def _join(peers: PeerClient, settings: Settings, waiting: _Waiting
                ) -> Settings | rule.Wait:
    """One round for a member without a database: bootstrap, seed, or wait."""
    c = settings.cluster
    views = await probe_all(peers, settings)
    check_lane_count(views, settings.server.lanes)
    waiting.silent = {v.node_id for v in views if not v.answered}
    decision = rule.decide(views, cluster_id=c.cluster_id,
                           member_ids=c.member_ids, mode=c.initial_state)
    if isinstance(decision, rule.Refuse):
        raise ClusterMismatch(decision.reason)
    if isinstance(decision, rule.Bootstrap):
        log.warning("every member answered and none holds data: bootstrapping a new "
                    "cluster (id %s) together with %s", decision.cluster_id,
                    ", ".join(p.node_id for p in c.peers))
        return replace(settings, cluster=replace(c, initial_state="new",
                                                 cluster_id=decision.cluster_id))
    if isinstance(decision, rule.Seed):
        try:
            await seed_from_peers(settings, donors=decision.donors)
            return settings
        except Unavailable as exc:
            return rule.Wait(f"seeding failed: {exc}", decision.donors)
    return decision


async def prepare(settings: Settings, notifier: Notifier | None = None) -> Settings:
    """The settings to build the node with, once this member has a database
    it can serve or knows it bootstraps one. Returns at once for a member
    with data, unless its database must still recover: then it first asks
    whether the others can still give it what it lacks (:func:`_check_copy`),
    and one that lacks ops no member logs any more is set aside and the
    member joins as one without a database."""
    db = Path(settings.store.db_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    c = settings.cluster
    # (--initial-cluster-state new changes nothing for a member with a database.)
    copy_vv = await asyncio.to_thread(copy_to_recover, db) if c.peers else None
    if copy_vv is None and not needs_join(settings):
        return settings
    notifier = notifier or Notifier(None)
    waiting = _Waiting(settings, rule.WAITING if copy_vv is None else rule.CHECKING)
    runner = web.AppRunner(_waiting_app(waiting), access_log=None)
    peers = PeerClient(c.node_id, {p.node_id: p.url for p in c.peers}, c.secret,
                       now_s=waiting.now_s, tls=lambda peer: tls.client_context(settings, peer))
    delay = limits.join_retry_first_secs
    logged, logged_at = "", 0.0
    try:
        await runner.setup()
        site = web.TCPSite(runner, settings.server.host, settings.server.peer_port,
                           reuse_address=True, ssl_context=tls.server_context(settings))
        await site.start()
        if copy_vv is None:
            log.info("no database at %s: asking the other members (%s) whether this cluster is "
                     "new or holds data", db, ", ".join(p.node_id for p in c.peers))
        else:
            log.info("the database at %s must recover: asking the other members (%s) whether "
                     "they still hold what it lacks", db, ", ".join(p.node_id for p in c.peers))
        await peers.start()
        while True:
            if copy_vv is not None:
                checked = await _check_copy(peers, settings, copy_vv, waiting)
                if isinstance(checked, rule.KeepCopy):
                    return settings
                if isinstance(checked, rule.SetAside):
                    await asyncio.to_thread(_set_aside, settings, checked.lost)
                    copy_vv, waiting.state = None, rule.WAITING
                    continue
                decision = checked
            else:
                joined = await _join(peers, settings, waiting)
                if isinstance(joined, Settings):
                    return joined
                decision = joined
            waiting.reason, waiting.waiting_for = decision.reason, decision.waiting_for
            now = time.monotonic()
            if decision.reason != logged or now - logged_at >= limits.join_log_every_secs:
                log.warning("waiting before serving: %s", decision.reason)
                logged, logged_at = decision.reason, now
            notifier.notify(f"EXTEND_TIMEOUT_USEC={int(limits.join_systemd_extend_secs * 1e6)}",
                            f"STATUS=waiting for peers: {decision.reason[:200]}")
            if await waiting.pause(delay * random.uniform(0.8, 1.2)):
                # A member that asked has just started: ask it (and the
                # others) again right away, and from the shortest delay on,
                # since its own decision is moments away.
                await asyncio.sleep(limits.join_retry_first_secs * random.uniform(0.5, 1.0))
                delay = limits.join_retry_first_secs
            else:
                delay = min(delay * 2, limits.join_retry_max_secs)
    finally:
        await peers.close()
        await runner.cleanup()


__all__ = ["HELLO_PATH", "WAITING_STATE", "hello_answer", "needs_join", "prepare", "probe_all"]
