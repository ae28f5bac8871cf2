"""The monitor's revert rule (checker rule 5) and the lease rule (8) on
hand-made views and histories.

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

from collections import Counter
from types import SimpleNamespace
from typing import Any

from tests.sim.checker import Held, Monitor, _holder_checks

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


# Rule 8 (leases) on hand-made histories: holders, expiries, ranks.
R = [(1025, 100 + i, "n0", i) for i in range(10)]  # ranks in the owner's order


def _lease_monitor() -> tuple[Monitor, Any, list[str]]:
    sim = SimpleNamespace(now=T0, history=SimpleNamespace(send_bodies={MID: {}}, lease_tokens={}),
                          nodes={}, stats=Counter())
    sim.monitor = Monitor(sim)  # type: ignore[arg-type]
    return sim.monitor, sim, []


def _held(mon: Monitor, rank: Any, token: str | None, kind: str = "pop",
          until: int | None = None) -> None:
    mon.held.setdefault(MID, []).append(
        Held(rank, token or "req:r9", token, kind, f"s-{token}", T0, until))


def _expiry(mon: Monitor, rank: Any, token: str, at_ms: int = T0) -> None:
    mon.expiries.setdefault(MID, {})[(rank[2], rank[3])] = (rank, token, at_ms)


def test_a_second_holder_after_an_expiry_of_the_first_is_no_violation() -> None:
    mon, sim, out = _lease_monitor()
    _held(mon, R[0], "tok-a")
    _held(mon, R[1], "tok-a", "renew")
    _expiry(mon, R[2], "tok-a")
    _held(mon, R[3], "tok-b")
    _held(mon, R[4], "tok-b", "complete")
    _holder_checks(sim, out.append)
    assert out == [] and sim.stats["two_holder_violations"] == 0


def test_a_second_holder_without_an_expiry_between_is_two_live_holders() -> None:
    mon, sim, out = _lease_monitor()
    _held(mon, R[0], "tok-a")
    _expiry(mon, R[1], "tok-a")  # before the renew: it ended an earlier lease
    _held(mon, R[2], "tok-a", "renew")
    _held(mon, R[3], "tok-b")
    _holder_checks(sim, out.append)
    assert len(out) == 1 and "two live holders" in out[0]


def test_an_old_holder_acting_after_the_new_one_is_two_live_holders() -> None:
    mon, sim, out = _lease_monitor()
    _held(mon, R[0], "tok-a")
    _expiry(mon, R[1], "tok-a")
    _held(mon, R[2], "tok-b")
    _held(mon, R[3], "tok-a", "complete")  # a completion by the expired holder
    _holder_checks(sim, out.append)
    assert len(out) == 1 and "complete" in out[0]


def test_a_claim_without_lease_never_changes_holder() -> None:
    mon, sim, out = _lease_monitor()
    _held(mon, R[0], None)
    _held(mon, R[1], "tok-b")
    _holder_checks(sim, out.append)
    assert len(out) == 1


def test_an_expiry_before_the_acknowledged_deadline_is_a_violation() -> None:
    mon, sim, out = _lease_monitor()
    _held(mon, R[0], "tok-a", until=T0 + 1_000)
    _expiry(mon, R[1], "tok-a", at_ms=T0 + 999)
    _holder_checks(sim, out.append)
    assert len(out) == 1 and "1 ms early" in out[0]
    # unless an unacknowledged renew (which the owner knew) shortened it
    mon, sim, out = _lease_monitor()
    _held(mon, R[0], "tok-a", until=T0 + 1_000)
    mon.lease_ops[MID] = {("n0", 9): (R[1], "tok-a", T0 + 500)}
    _expiry(mon, R[2], "tok-a", at_ms=T0 + 999)
    _holder_checks(sim, out.append)
    assert out == []


def test_an_acknowledged_leased_claim_shown_then_pending_after_its_expiry_is_no_revert() -> None:
    mon, sim, disk = _monitor()
    sim.history.lease_tokens["sess97"] = "tok-97"
    _show(mon, sim, disk, AWAITING, PENDING, ACKED_CLAIM)
    _show(mon, sim, disk, PENDING)
    assert len(mon.violations) == 1 and "reverted" in mon.violations[0]  # no expiry known
    mon, sim, disk = _monitor()
    sim.history.lease_tokens["sess97"] = "tok-97"
    _show(mon, sim, disk, AWAITING, PENDING, ACKED_CLAIM)
    # an expiry of that token ranked above the claim shown (rank (3072, 1, "n1", 1))
    mon.expiries[MID] = {("n1", 2): ((3072, 2, "n1", 2), "tok-97", T0)}
    _show(mon, sim, disk, PENDING)
    assert mon.violations == []
