"""The composition root: :func:`build_node` turns one Settings into a Node.

Everything a node is made of is constructed here, in dependency order, and
nowhere else: the clock and metrics; the store (opened, so the core can be
loaded from it); the pure core; the peer client and one link per peer; the
background task owner; the effect runner, the anti-entropy pusher, the read
quorum and the mailbox router; admission hooks; webhooks and the identity
directory (registered as applied-ops listeners before anything can apply an
op) and the push-stream hub beside them; the peer request verifier, the
last-seen throttle and the key directory (the static keys of ``[auth]``
chained before the replicated ones). Route modules receive the finished
node and build nothing themselves.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from common import limits
from common.errors import ClusterMismatch
from common.ops import IDENT_KEY
from common.policy import Directory
from daemon.http.admission import Admission
from daemon.http.backpressure import Backpressure
from daemon.http.stream_hub import StreamHub
from daemon.identity.bootstrap import ensure_root_key
from daemon.identity.memory_directory import ChainDirectory, static_directory
from daemon.identity.replicated_directory import ReplicatedDirectory
from daemon.lanes.hop import Siblings
from daemon.lanes.layout import check_layout, layout_value
from daemon.node import Node
from daemon.peer.auth import Verifier
from daemon.peer.client import PeerClient
from daemon.peer.link import PeerLink
from daemon.replication.anti_entropy import Pusher
from daemon.replication.effect_runner import EffectRunner
from daemon.replication.mailbox_router import MailboxRouter
from daemon.replication.read_quorum import ReadQuorum
from daemon.replication.seeding import needs_seed, seed_from_peers
from daemon.runtime.clock import Clock
from daemon.runtime.metrics import Metrics
from daemon.runtime.tasks import Background
from daemon.runtime.tls import client_context
from daemon.services.agents import SeenThrottle
from daemon.settings import Settings
from daemon.webhooks.service import Webhooks
from daemon.webhooks.ssrf import AddressPolicy
from federation.bootstrap import derived_cluster_id
from federation.core import NodeCore
from store.db import Store

log = logging.getLogger("ai_memory.node")


def _terminate_self() -> None:
    """What a fatal store failure does: stop the process (systemd restarts
    it; it recovers from its database and peers)."""
    os.kill(os.getpid(), signal.SIGTERM)


@dataclass(frozen=True, slots=True)
class _WebhookHost:
    """What the webhook service needs of the node."""

    settings: Settings
    node_id: str
    metrics: Metrics
    now_ms: Callable[[], int]


async def _load_core(settings: Settings, store: Store) -> NodeCore:
    state = await store.load_core_state()
    c = settings.cluster
    recovering = await store.recovering()
    if recovering and ((store.created and c.initial_state == "new") or not c.peers):
        # Bootstrapping (an empty database is a new member), or a single node:
        # there is nobody to recover from, nor anyone it could contradict.
        await store.set_recovering(False)
        recovering = False
    if recovering:
        log.warning("this member's database is new or restored: it recovers from every other "
                    "member before it votes in claim rounds (docs/federation.md)")
    return NodeCore(
        c.node_id, list(c.member_ids), c.w,
        quorum_timeout_ms=c.quorum_timeout_ms,
        claim_timeout_ms=limits.claim_timeout_ms,
        catchup_interval_ms=int(c.catchup_interval_secs * 1000),
        vv=dict(state.vv), last_hlc=state.max_hlc, own_max_seq=state.own_max_seq,
        promises=dict(state.promises), rng=random.Random(),
        recovering=recovering, incarnation=await store.incarnation())


async def _check_cluster_id(settings: Settings, store: Store) -> str:
    """The database's cluster id, checked against the configured one; a
    database without one (new, or from before ids) takes the configured or
    derived id."""
    c = settings.cluster
    stored = await store.cluster_id()
    if not stored:
        stored = c.cluster_id or derived_cluster_id(c.member_ids)
        await store.set_cluster_id(stored)
    elif c.cluster_id and stored != c.cluster_id:
        raise ClusterMismatch(
            f"the database at {settings.store.db_path} belongs to cluster {stored}, but this "
            f"member is configured for cluster {c.cluster_id}: point --db at this cluster's "
            "database, or fix [cluster] cluster_id")
    return stored


async def _check_lane(settings: Settings, store: Store) -> None:
    """The database is this lane's, of this lane count (daemon/lanes/layout.py);
    a new database of a lane records which it is."""
    s = settings.server
    stored = await store.lane_layout()
    check_layout(stored, s.lane, s.lanes, settings.store.db_path, fresh=store.created)
    if not stored and s.laned:
        await store.set_lane_layout(layout_value(s.lane, s.lanes))


def _siblings(settings: Settings) -> Siblings | None:
    s = settings.server
    return Siblings(s.lane_dir, s.lane, s.lanes) if s.laned and s.lane_dir else None


def _admission(settings: Settings, metrics: Metrics, clock: Clock) -> Admission:
    hooks = settings.webhooks
    policy = AddressPolicy(allow_loopback=hooks.allow_loopback_webhooks,
                           allow_private=hooks.allow_private_webhooks)
    return Admission(settings.mail.admission, policy, metrics, clock.now_ms)


def _round_trips(links: dict[str, PeerLink]) -> Callable[[str], float | None]:
    """Each peer's round trip as its link measured it lately (daemon/peer/pacing.py)."""
    def round_trip(peer: str) -> float | None:
        link = links.get(peer)
        return None if link is None else link.pacer.recent_floor(time.monotonic())
    return round_trip


async def build_node(settings: Settings, *, clock: Callable[[], float] = time.time,
                     on_fatal: Callable[[], None] = _terminate_self,
                     directory: Directory | None = None) -> Node:
    """A complete, not yet started node. ``await node.start()`` runs it."""
    node_clock = Clock(clock, settings.clock_offset_ms)
    metrics = Metrics()
    c = settings.cluster
    if needs_seed(settings):
        await seed_from_peers(settings)
    store = await Store.open(settings.store.db_path, c.node_id)
    try:
        await _check_lane(settings, store)
        cluster_id = await _check_cluster_id(settings, store)
        if cluster_id != c.cluster_id:  # what the node reports is what its database holds
            settings = replace(settings, cluster=replace(c, cluster_id=cluster_id))
            c = settings.cluster
        if settings.auth.bootstrap_root_key:
            await ensure_root_key(store, c.node_id, settings.auth.bootstrap_root_key,
                                  settings.auth.root_username or "admin")
        core = await _load_core(settings, store)
    except BaseException:
        await store.close()
        raise
    peers = PeerClient(c.node_id, {p.node_id: p.url for p in c.peers}, c.secret,
                       now_s=node_clock.now_s, incarnation=core.incarnation,
                       tls=lambda peer: client_context(settings, peer))
    background = Background()
    links: dict[str, PeerLink] = {}

    def send(peer: str, msg: Any) -> None:
        link = links.get(peer)
        if link is not None:
            link.send(msg)

    runner = EffectRunner(store=store, core=core, metrics=metrics, now_ms=node_clock.now_ms,
                          send=send, push_missing=lambda p, vv: pusher.request(p, vv),
                          on_fatal=on_fatal)
    async def link_failed(peer: str) -> None:
        router.peer_lost(peer)
        await runner.send_failed(peer)

    async def link_replies(peer: str, msgs: list[Any], incarnation: str) -> None:
        # Messages a peer sent back in its HTTP response. What the core
        # answers to them goes out on the link to that peer (no response
        # is waiting to carry it).
        for reply in await runner.receive(peer, router.take_forwards(peer, msgs, incarnation),
                                           incarnation):
            send(peer, reply)

    for peer in c.peers:
        links[peer.node_id] = PeerLink(peer.node_id, peers=peers, metrics=metrics,
                                       spawn=background.spawn, on_failed=link_failed,
                                       on_replies=link_replies)
    pusher = Pusher(store=store, peers=peers, metrics=metrics, spawn=background.spawn,
                    on_failed=link_failed, on_replies=link_replies,
                    grace_s=min(limits.sync_push_grace_secs, c.catchup_interval_secs / 2),
                    horizon_s=2 * c.catchup_interval_secs)
    reads = ReadQuorum(c, runner=runner, peers=peers, metrics=metrics, now_ms=node_clock.now_ms,
                       round_trip=_round_trips(links))
    webhooks = Webhooks(_WebhookHost(settings, c.node_id, metrics, node_clock.now_ms))
    runner.applied_listeners.append(webhooks.on_applied)
    identity = ReplicatedDirectory(lambda: store.reads, lambda: reads.barrier(IDENT_KEY),
                                    has_peers=bool(c.peers),
                                    root_username=settings.auth.root_username or "",
                                    now_ms=node_clock.now_ms, count=metrics.inc)
    runner.applied_listeners.append(identity.on_applied)
    streams = StreamHub(store.seen_copy(), settings.streams, metrics)
    runner.applied_listeners.append(streams.on_applied)
    backpressure = Backpressure(store, background, metrics)
    router = MailboxRouter(c.node_id, runner=runner, store=store, peers=peers, metrics=metrics,
                           now_ms=node_clock.now_ms, admit=backpressure.check,
                           links=dict(links), spawn=background.spawn)
    return Node(settings, clock=node_clock, metrics=metrics, store=store, core=core,
                peers=peers, links=links, background=background, runner=runner,
                pusher=pusher, backpressure=backpressure, reads=reads, router=router,
                admission=_admission(settings, metrics, node_clock), webhooks=webhooks,
                verifier=Verifier(c.secret, settings.cluster.node_id), seen_throttle=SeenThrottle(),
                directory=directory if directory is not None
                else ChainDirectory(static_directory(settings.auth), identity),
                identity=identity, streams=streams, siblings=_siblings(settings))
