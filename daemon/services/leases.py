"""Leased claims: their terms, and the sweep that finds the ones that ran out.

A pop with a lease (``mail.pop(lease_secs=...)``) claims a message with a
claim token and a deadline. Its holder, who alone knows the token, renews
the lease or completes the message before the deadline; otherwise the
mailbox's owner returns the message to the queue (``msg.expire``) and the
next pop gets it. Every one of these is the owner's decision, fenced by its
epoch like a claim (docs/federation.md, "Leases"), so a token whose lease
ran out is refused even through a node that has not heard of the expiry.

The token is a bearer secret of the claim: whoever shows it (with the
right to complete messages of that mailbox) acts as the holder. It is
returned by the pop only, never by a list or a read. Renewing and
completing are in :mod:`daemon.services.completion`.
"""

from __future__ import annotations

import asyncio
import logging
from secrets import token_urlsafe
from typing import Any

from common import limits
from common.errors import AiMemoryError, BadRequest
from common.ops import mailbox_key
from daemon.ports import MailPorts
from daemon.schemas.timefmt import rfc3339 as iso_ms
from federation.requests import MailExpire

log = logging.getLogger(__name__)


def new_token() -> str:
    """A claim token: 144 random bits, URL-safe."""
    return token_urlsafe(18)


def lease_ms(lease_secs: float | None) -> int | None:
    """A lease length in ms, checked against the limits (None: no lease)."""
    if lease_secs is None:
        return None
    lo, hi = limits.claim_lease_secs_min, limits.claim_lease_secs_max
    if not lo <= lease_secs <= hi:
        raise BadRequest(f"a lease is {lo} to {hi} seconds, not {lease_secs:g}",
                         limit="claim_lease_secs")
    return int(lease_secs * 1000)


def lease_json(claim: dict[str, Any]) -> dict[str, Any]:
    """What a pop or renew answers about a leased claim (its holder only)."""
    return {"claim_token": claim.get("token"),
            "lease_seconds": int(claim.get("lease_ms") or 0) / 1000,
            "lease_until": iso_ms(claim.get("lease_until_ms")),
            "delivery": claim.get("delivery")}


class Sweeper:
    """Asks the owner of every mailbox this node holds an overdue lease of
    (past its deadline by ``limits.lease_sweep_grace_ms``) to expire it: an
    owner expires its own on time, this covers a mailbox nobody owns now
    (its owner went idle, crashed or lost its term). A mailbox whose owner
    answers that nothing is due (this store shows a lease the owner knows
    ended another way) is asked again only after a backoff that doubles up
    to ``limits.lease_sweep_backoff_max_secs``, so it neither keeps an owner
    busy nor crowds out the others."""

    def __init__(self, node: MailPorts) -> None:
        self.node = node
        self.quiet: dict[tuple[str, str], tuple[int, float]] = {}  # box -> (next try ms, backoff s)

    async def once(self, now_ms: int) -> list[str]:
        due = await self.node.store.due_lease_mailboxes(
            now_ms - limits.lease_sweep_grace_ms, limit=limits.lease_sweep_mailboxes_max)
        self.quiet = {box: q for box, q in self.quiet.items() if box in due}
        expired: list[str] = []
        for box in due:
            quiet = self.quiet.get(box)
            if quiet is not None and quiet[0] > now_ms:
                continue
            try:
                got = await self.node.mailbox(MailExpire(mailbox_key(*box)))
            except AiMemoryError as exc:  # no majority now: the next sweep tries again
                log.debug("lease sweep of %s/%s: %s", *box, exc)
                continue
            if got:
                expired += got
                self.quiet.pop(box, None)
            else:
                wait = min(limits.lease_sweep_backoff_max_secs,
                           2 * quiet[1] if quiet else limits.lease_sweep_secs * 5)
                self.quiet[box] = (now_ms + int(wait * 1000), wait)
        return expired


async def sweep_loop(node: MailPorts) -> None:
    """Every ``limits.lease_sweep_secs``: one :class:`Sweeper` pass."""
    sweeper = Sweeper(node)
    while True:
        await asyncio.sleep(limits.lease_sweep_secs)
        try:
            expired = await sweeper.once(node.now_ms())
            if expired:
                log.info("returned %d message(s) whose lease ran out to their queue", len(expired))
        except Exception:
            log.exception("lease sweep failed")
