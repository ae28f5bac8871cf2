"""The monitor's revert rule (checker rule 5) on hand-made views.

5-node seed 2824: the mailbox owner n1, cut off, stamped a cancel of msg22
at epoch 1025 whose round failed (never acknowledged); n1 showed it. A later
owner, n0, approved msg22 at epoch 3072 (ranked with holds and releases,
so it voids the older cancel: docs/federation.md, ``MailDecide``) and then
claimed it for an acknowledged pop. n1 received the approval before the
claim and showed msg22 pending for a sample. That is no revert of anything
acknowledged: what n1 had shown was the void cancel, not the acknowledged
claim. A node that showed the acknowledged claim (or cancel) and then shows
it pending is still a violation.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.sim.checker import Monitor

T0 = 1_700_000_000_000
MID = "msg22"
AWAITING = ("awaiting_approval", None, None, None, 1025)
VOID_CANCEL = ("cancelled", None, None, None, 1025)
PENDING = ("pending", None, None, None, 1025)
ACKED_CLAIM = ("claimed", "req98", "sess97", T0 + 160_962, 3072)


class _Disk:
    def __init__(self) -> None:
        self.shown: tuple[Any, ...] | None = None

    def message(self, mid: str) -> dict[str, Any] | None:
        if self.shown is None:
            return None
        state, request, session, at_ms, epoch = self.shown
        return {"state": state, "request_id": request, "claimed_by_session": session,
                "claimed_at_ms": at_ms, "epoch": epoch}

    def decided_rank(self, mid: str) -> tuple[int, int, str, int] | None:
        if self.shown is None or self.shown[0] not in ("claimed", "cancelled"):
            return None
        return (self.shown[4], 1, "n1", 1)

    def terminal_stands(self, mid: str) -> bool:
        return self.shown is not None and self.shown[0] in ("claimed", "cancelled")

    def is_purged(self, mid: str) -> bool:
        return False


def _monitor() -> tuple[Monitor, Any, _Disk]:
    disk = _Disk()
    sim = SimpleNamespace(now=T0, history=SimpleNamespace(send_bodies={MID: {}},
                                                               lease_tokens={}),
                          nodes={"n1": SimpleNamespace(disk=disk)})
    mon = Monitor(sim)  # type: ignore[arg-type]
    # the acknowledged pop: req98 by sess97, decided at epoch 3072
    mon.popped[MID] = "req:req98"
    mon.popped_session[MID] = "sess97"
    mon.popped_claim[MID] = ("req98", "sess97")
    mon.popped_epoch[MID] = 3072
    return mon, sim, disk


def _show(mon: Monitor, sim: Any, disk: _Disk, *views: tuple[Any, ...]) -> None:
    for view in views:
        sim.now += 100
        disk.shown = view
        mon.sample()


def test_a_void_cancel_then_pending_is_no_revert_of_the_acknowledged_claim() -> None:
    mon, sim, disk = _monitor()
    _show(mon, sim, disk, AWAITING, VOID_CANCEL, PENDING, ACKED_CLAIM)
    assert mon.violations == []


def test_the_acknowledged_claim_shown_then_pending_is_a_revert() -> None:
    mon, sim, disk = _monitor()
    _show(mon, sim, disk, AWAITING, PENDING, ACKED_CLAIM, PENDING)
    assert len(mon.violations) == 1 and "reverted" in mon.violations[0]


def test_the_acknowledged_cancel_shown_then_pending_is_a_revert() -> None:
    mon, sim, disk = _monitor()
    del mon.popped[MID], mon.popped_claim[MID], mon.popped_epoch[MID]
    mon.cancelled.add(MID)
    _show(mon, sim, disk, AWAITING, VOID_CANCEL, PENDING)
    assert len(mon.violations) == 1 and "reverted" in mon.violations[0]
