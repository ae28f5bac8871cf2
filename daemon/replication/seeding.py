"""Seeding a member that lost its disk from a copy of a peer's database.

A member started with no database file while its cluster already exists
(found so by :mod:`daemon.replication.joining`, or told by ``--initial-cluster-state
existing``) cannot rebuild what
the others garbage-collected from their op logs: anti-entropy only streams
ops still in a log. So before it opens a store it asks each peer in turn
for a consistent online backup (``POST /api/v1/admin/backup``, signed like
any peer request), installs the first one that arrives as its database
under a new incarnation, without that peer's promises, and marked as
recovering (:func:`store.backup.restore`). The core then recovers from
every member before it votes (docs/federation.md, "A member that lost its
disk"). With no donor reachable it raises :class:`Unavailable`, and the
caller (:func:`daemon.replication.joining.prepare`) waits and asks again.

Before it downloads a peer's copy it tells every peer so
(:class:`federation.messages.Reseeding` on the batched peer channel), and
downloads only from a peer that took the message: the last offer the peers
hold from this member describes the lost disk, and a donor that still took
GC floors over it could collect an op it received after making the copy,
which the seeded member would then wait for forever.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import aiohttp

from common import limits
from common.errors import Unavailable
from daemon.peer.auth import BOOT_HEADER, sign
from daemon.peer.client import BACKUP_PATH, PeerClient, PeerUnreachable
from daemon.runtime.tls import client_context
from daemon.settings import Settings
from federation.messages import Reseeding
from store.backup import restore
from store.db import holds_data

log = logging.getLogger("ai_memory.node")


async def _download(session: aiohttp.ClientSession, settings: Settings, peer: str, url: str,
                    dest: Path) -> None:
    c = settings.cluster
    boot = ""
    for attempt in (1, 2):
        headers = {"Content-Type": "application/octet-stream", "X-AIM-Node": c.node_id}
        if c.secret:
            headers.update(sign(c.secret, c.node_id, peer, "POST", BACKUP_PATH, b"",
                                time.time() + settings.clock_offset_ms / 1000, boot))
        async with session.post(url + BACKUP_PATH, data=b"", headers=headers,
                                ssl=client_context(settings, peer)) as resp:
            if resp.status == 401 and resp.headers.get(BOOT_HEADER) and attempt == 1:
                boot = resp.headers[BOOT_HEADER]
                continue
            if resp.status != 200:
                raise Unavailable(f"{peer} answered {resp.status}: {(await resp.text())[:200]}")
            fh = await asyncio.to_thread(open, dest, "wb")
            try:
                async for chunk in resp.content.iter_chunked(limits.backup_chunk_bytes):
                    await asyncio.to_thread(fh.write, chunk)
            finally:
                fh.close()
            return


async def seed_from_peers(settings: Settings, donors: tuple[str, ...] | None = None) -> str:
    """Install a peer's copy as this member's database; returns the peer.
    ``donors``: the members to try, in order (default: every peer)."""
    db = Path(settings.store.db_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    part = db.with_name(db.name + ".seed")
    timeout = aiohttp.ClientTimeout(total=limits.backup_http_timeout_secs)
    c = settings.cluster
    peers = PeerClient(c.node_id, {p.node_id: p.url for p in c.peers}, c.secret,
                       now_s=lambda: time.time() + settings.clock_offset_ms / 1000,
                       tls=lambda peer: client_context(settings, peer))
    errors = []
    await peers.start()
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(
                ssl=client_context(settings))) as session:
            by_id = {m.node_id: m for m in c.peers}
            for member in [by_id[d] for d in donors if d in by_id] if donors else c.peers:
                try:
                    # Every peer first drops the GC floor it holds for us;
                    # the donor must have, before its copy is made.
                    if member.node_id not in await announce(peers, settings, member.node_id):
                        raise Unavailable("it did not take the Reseeding message")
                    await _download(session, settings, member.node_id,
                                    member.url.rstrip("/"), part)
                    # A file a command made offline (user add --db) holds
                    # nothing of the cluster: the copy replaces it.
                    await asyncio.to_thread(restore, part, db, foreign=True,
                                            force=not holds_data(db))
                    log.warning("no database at %s: seeded from %s's copy; recovering from "
                                "every member before voting", db, member.node_id)
                    return member.node_id
                except (aiohttp.ClientError, OSError, TimeoutError, Unavailable) as exc:
                    errors.append(f"{member.node_id}: {exc}")
                finally:
                    part.unlink(missing_ok=True)
    finally:
        await peers.close()
    raise Unavailable("this member has no database and no peer could seed it ("
                      + "; ".join(errors) + ")")


async def announce(peers: PeerClient, settings: Settings, donor: str,
                   timeout_s: float | None = None) -> set[str]:
    """Send ``Reseeding(donor)`` to every peer at once; the peers that took it
    (a peer older than protocol 4 takes it too, and skips it). ``peers``
    names no incarnation: the new one is not the peers' to fence by yet."""
    ids = [m.node_id for m in settings.cluster.peers]
    msg = [Reseeding(donor).to_wire()]
    got = await asyncio.gather(*(peers.call(p, "/peer/v1/msgs", msg, timeout_s=timeout_s)
                                 for p in ids),
                               return_exceptions=True)
    for p, r in zip(ids, got, strict=True):
        if isinstance(r, PeerUnreachable):
            log.info("%s did not take Reseeding (%s)", p, r.reason)
        elif isinstance(r, BaseException):
            raise r
    return {p for p, r in zip(ids, got, strict=True) if not isinstance(r, BaseException)}


def needs_seed(settings: Settings) -> bool:
    """A node built with peers and no data that is not bootstrapping. (``serve``
    settles this before it builds the node, see :mod:`daemon.replication.joining`.)"""
    c = settings.cluster
    return bool(c.peers) and c.initial_state != "new" and not holds_data(settings.store.db_path)
