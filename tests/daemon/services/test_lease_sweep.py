"""The lease sweep's pacing (daemon/services/leases.py), against a fake node:
a mailbox whose owner says nothing is due is asked again only after a
backoff that doubles, and one that expired something is asked at once."""

from __future__ import annotations

from typing import Any

from common import limits
from daemon.services.leases import Sweeper
from federation.requests import MailExpire


class _Store:
    def __init__(self) -> None:
        self.due: list[tuple[str, str]] = []

    async def due_lease_mailboxes(self, before_ms: int,
                                  limit: int = 100) -> list[tuple[str, str]]:
        return self.due[:limit]


class _Node:
    def __init__(self) -> None:
        self.store = _Store()
        self.asked: list[str] = []
        self.answers: dict[str, list[str]] = {}

    async def mailbox(self, req: Any) -> Any:
        assert isinstance(req, MailExpire)
        self.asked.append(req.mailbox)
        return self.answers.get(req.mailbox, [])


async def test_a_mailbox_with_nothing_due_backs_off_and_one_that_expired_does_not() -> None:
    node = _Node()
    node.store.due = [("w", "quiet"), ("w", "busy")]
    node.answers["mbox:w/busy"] = ["m1"]
    sweeper = Sweeper(node)  # type: ignore[arg-type]
    first = limits.lease_sweep_secs * 5 * 1000
    t = 1_000_000
    assert await sweeper.once(t) == ["m1"]
    assert node.asked == ["mbox:w/quiet", "mbox:w/busy"]
    node.asked.clear()
    for step in range(3):  # within the first backoff: only the busy one
        await sweeper.once(t + 1000 * (step + 1))
    assert node.asked == ["mbox:w/busy"] * 3
    node.asked.clear()
    await sweeper.once(t + int(first) + 1)  # the backoff ran out: asked again, then doubled
    assert node.asked == ["mbox:w/quiet", "mbox:w/busy"]
    node.asked.clear()
    await sweeper.once(t + int(first) + 1 + int(first) + 1)
    assert node.asked == ["mbox:w/busy"]
    node.store.due = [("w", "busy")]  # the quiet one is no longer due: forgotten
    await sweeper.once(t + 10 ** 7)
    assert ("w", "quiet") not in sweeper.quiet
