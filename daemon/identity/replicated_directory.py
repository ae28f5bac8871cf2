"""The replicated directory: where a presented key becomes a Principal.

:class:`ReplicatedDirectory` implements :class:`common.policy.Directory`
over the node's own copy of the ``user.put`` / ``apikey.put`` /
``pgrant.put`` records (all under the op key ``ident:dir``).

How a key resolves (``resolve``):

1. Only a directory key (``aim_...``, at most ``limits.api_key_max_chars``)
   is looked up; its SHA-256 is the lookup key. Static ``[auth].api_keys``
   are not this module's.
2. The node must hold a *lease*: a read quorum of the identity records
   (:meth:`daemon.node.Node.read_barrier` on ``ident:dir``) that started
   less than ``limits.identity_lease_ms`` ago. A node that has just started
   holds none, so its first keyed request waits for that read, and a node
   that cannot reach a quorum answers 503 ``identity_unconfirmed``
   (retryable) instead of trusting what it holds. While requests keep
   coming, the lease is renewed in the background once half of it is gone,
   so a warm node never makes a keyed request wait for a peer.
3. The principal is taken from an in-memory cache, or built from the local
   tables and cached. Every applied identity op (local or replicated)
   clears the cache at once, so a revocation this node has applied is
   refused on the next request.
4. A hash this node does not know may belong to a key just created through
   another member (held by W members, not yet here): the node reads a
   quorum that *started after the request arrived* and looks again, so a
   key acknowledged anywhere works everywhere at once. Only then is the
   answer None (401).

Why a revocation acknowledged anywhere is refused everywhere: the admin
action writes the revocation to W members and then answers once every
member has confirmed that it applied it (:mod:`daemon.identity.admin`), or,
if one does not confirm in time, once ``identity_lease_ms +
identity_lease_margin_ms`` have passed since W members held it. A member
that accepts the key after that holds a lease whose read quorum started
after the revocation was on W members; R + W > N, so that read met a holder
and brought the revocation along. A member that was down, paused or cut off
has no valid lease once it runs again (leases are measured on the monotonic
clock, which keeps counting while a process is stopped), so it reads a
quorum, and learns of the revocation, before it accepts any key.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from common import limits
from common.errors import DirectoryUnconfirmed, QuorumNotMet
from common.ops import IDENTITY_KINDS, Op
from common.policy import KEYS, Principal, ProjectGrant
from daemon.identity.secrets import check_password, hash_password, hash_secret, looks_like_key
from store import identity as I
from store.reader import ReadPool

log = logging.getLogger("ai_memory.identity")

_CACHE_MAX = 10_000


def _failed(fut: asyncio.Future[None]) -> bool:
    return fut.done() and (fut.cancelled() or fut.exception() is not None)


def _consume(fut: asyncio.Future[None]) -> None:
    """Retrieve a shared read's outcome so it is never reported as lost."""
    if not fut.cancelled():
        fut.exception()


@functools.cache
def _dummy_hash() -> str:
    """Checked against for a user without a password, so a miss costs what a hit does."""
    return hash_password("not a password of anyone")


class ReplicatedDirectory:
    def __init__(self, reads: Callable[[], ReadPool], barrier: Callable[[], Awaitable[None]], *,
                 has_peers: bool, root_username: str = "",
                 lease_ms: int = limits.identity_lease_ms,
                 margin_ms: int = limits.identity_lease_margin_ms,
                 monotonic: Callable[[], float] = time.monotonic,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 count: Callable[[str], None] = lambda name: None) -> None:
        self._reads = reads
        self._barrier = barrier
        self.has_peers = has_peers
        self.root_username = root_username
        self.lease_s = lease_ms / 1000
        self.margin_s = margin_ms / 1000
        self._mono = monotonic
        self._now_ms = now_ms
        self._count = count  # a metrics counter, by name
        self._lease_until = float("-inf")
        self._cache: dict[str, Principal] = {}
        self._gen = 0
        self._issued = 0  # quorum reads started so far (orders them against requests)
        self._inflight: tuple[int, asyncio.Future[None]] | None = None
        self._queued: asyncio.Future[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self.last_used_ms: dict[str, int] = {}  # key id -> when this node last accepted it
        self.stats = {"hits": 0, "loads": 0, "confirms": 0, "refused": 0}

    # -- the Directory protocol ---------------------------------------------
    async def resolve(self, secret: str) -> Principal | None:
        """The principal of a presented key; None if unknown, revoked or its
        user removed. Raises :class:`DirectoryUnconfirmed` (503) when this
        node cannot confirm its copy with a read quorum."""
        if not looks_like_key(secret) or len(secret) > limits.api_key_max_chars:
            return None
        arrived = self._issued
        digest = hash_secret(secret)
        await self._ensure_lease(arrived)
        found = self._cache.get(digest)
        if found is not None:
            self.stats["hits"] += 1
        else:
            found = await self._lookup(digest)
            if found is None:  # perhaps created through another member just now
                await self._confirm(arrived)
                found = await self._lookup(digest)
        if found is None:
            self.stats["refused"] += 1
            self._count("identity_keys_refused_total")
            return None
        if found.key_id is not None:
            self.last_used_ms[found.key_id] = self._now_ms()
        return found

    async def verify_password(self, name: str, password: str) -> Principal | None:
        """The principal of a user logging in with a password (the web
        inbox): no key, no bound agent. None for a wrong password, an unknown
        or removed user, or a user without a password."""
        arrived = self._issued
        await self._ensure_lease(arrived)
        user = await I.user(self._reads(), name)
        if user is None:
            await self._confirm(arrived)
            user = await I.user(self._reads(), name)
        stored = None if user is None or user["removed"] else user["password_hash"]
        ok = await asyncio.to_thread(lambda: check_password(password, stored or _dummy_hash()))
        if not ok or stored is None or user is None:
            return None
        return await self._principal(user, None)

    async def principal_for_user(self, name: str) -> Principal | None:
        """The principal of a user who logged in with a password earlier (a
        web session, asked again on every request): None once removed."""
        arrived = self._issued
        await self._ensure_lease(arrived)
        user = await I.user(self._reads(), name)
        if user is None or user["removed"]:
            return None
        return await self._principal(user, None)

    # -- keeping the copy fresh ------------------------------------------------
    def on_applied(self, ops: list[Op]) -> None:
        """Applied-ops listener: any identity change drops every cached principal."""
        if any(op.kind in IDENTITY_KINDS for op in ops):
            self._gen += 1
            self._cache.clear()

    async def outwait_leases(self, since: float) -> None:
        """What a revocation waits when a member did not confirm that it
        applied it: until ``identity_lease_ms + identity_lease_margin_ms``
        after ``since`` (monotonic; when W members held the revocation), so
        that no member still trusts a copy read before then."""
        if self.has_peers:
            remaining = since + self.lease_s + self.margin_s - self._mono()
            if remaining > 0:
                await asyncio.sleep(remaining)

    def monotonic(self) -> float:
        return self._mono()

    async def _ensure_lease(self, arrived: int) -> None:
        if not self.has_peers:
            return
        now = self._mono()
        if now < self._lease_until:
            if now > self._lease_until - self.lease_s / 2:
                self._renew_in_background()
            return
        await self._confirm(arrived)

    def _renew_in_background(self) -> None:
        if self._refresh is not None and not self._refresh.done():
            return

        async def renew() -> None:
            try:
                await self._confirm(self._issued)
            except Exception as exc:  # the next request that needs it retries in line
                log.debug("identity lease renewal failed: %s", exc)
        self._refresh = asyncio.ensure_future(renew())

    async def _confirm(self, arrived: int) -> None:
        """Wait for a read quorum of the identity records that started after
        a request that saw ``arrived`` reads started. One running read
        serves every request that arrived before it started; requests that
        arrive while it runs share one read queued behind it, so a flood of
        unknown keys costs at most one read in flight and one waiting."""
        if not self.has_peers:
            return
        current = self._inflight
        if current is not None and current[0] > arrived and not _failed(current[1]):
            await asyncio.shield(current[1])
            return
        if current is not None and not current[1].done():
            if self._queued is None:
                self._queued = asyncio.ensure_future(self._after(current[1]))
                self._queued.add_done_callback(_consume)
            await asyncio.shield(self._queued)
            return
        await asyncio.shield(self._start())

    def _start(self) -> asyncio.Future[None]:
        self._issued += 1
        fut = asyncio.ensure_future(self._read_quorum(self._mono()))
        fut.add_done_callback(_consume)
        self._inflight = (self._issued, fut)
        return fut

    async def _after(self, running: asyncio.Future[None]) -> None:
        await asyncio.wait([running])
        self._queued = None
        await self._start()

    async def _read_quorum(self, started: float) -> None:
        self.stats["confirms"] += 1
        self._count("identity_quorum_reads_total")
        try:
            await self._barrier()
        except QuorumNotMet as exc:
            self._count("identity_unconfirmed_total")
            raise DirectoryUnconfirmed(
                "this node cannot confirm its users and keys with a read quorum; retry, or "
                "ask another member", got=exc.details.get("got"),
                needed=exc.details.get("needed")) from None
        self._lease_until = max(self._lease_until, started + self.lease_s)

    # -- building principals ---------------------------------------------------
    async def _lookup(self, digest: str) -> Principal | None:
        gen = self._gen
        self.stats["loads"] += 1
        reads = self._reads()
        found = await I.keys_by_hash(reads, digest)
        if not found or any(k["revoked"] for k in found):
            return None
        key = min(found, key=lambda k: k["id"])
        user = await I.user(reads, key["user"])
        if user is None or user["removed"]:
            return None
        principal = await self._principal(user, key)
        if gen == self._gen:  # nothing changed while we read: safe to cache
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[digest] = principal
        return principal

    async def _principal(self, user: dict[str, Any], key: dict[str, Any] | None) -> Principal:
        root = bool(user["root"])
        grants: tuple[ProjectGrant, ...] = ()
        if not root:
            grants = tuple(ProjectGrant(g["workspace"], g["project"], g["access"])
                           for g in await I.grants(self._reads(), user=user["name"]))
        agent = None if key is None else key["agent"]
        return Principal(mode=KEYS, user=user["name"], root=root, agent=agent,
                         agent_bound=agent is not None,
                         key_id=None if key is None else key["id"], grants=grants,
                         owner_user=self.root_username if root else user["name"])
