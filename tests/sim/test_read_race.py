"""The simulator finds the read-your-writes race of issue 12 when its fix is undone.

The race: a quorum read waited only for the persists in flight when it
began. An intake arriving during the read's pulls counts an op in the
version vector while its write is still in flight; the pulled copy of that
op is then a duplicate, and the local query ran before the intake's commit,
missing a notification acknowledged before the read began. The fix
(:func:`federation.read.barriers_to_wait`: every barrier handed over until
the pulls were applied) is shared by the daemon and the simulator, so
putting the old rule back there re-opens the race in both; the simulator's
slow disks and inbox reads must then catch it.
"""

from __future__ import annotations

import pytest

from federation import read
from tests.sim.runner import run_seed
from tests.sim.workload import Workload

pytestmark = pytest.mark.slow  # 80 simulated runs

SEEDS = range(40)


@pytest.fixture(autouse=True)
def _without_approvals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeds that find the race were found before the approval queue's
    requests joined the workload, which moves every later request (and
    before leases, which change what later pops get)."""
    monkeypatch.setattr(Workload, "HELD_P", 0.0)
    monkeypatch.setattr(Workload, "DECIDE_P", 0.0)
    monkeypatch.setattr(Workload, "LEASE_P", 0.0)


def _read_misses() -> list[str]:
    found = []
    for seed in SEEDS:
        r = run_seed(seed)
        found += [f"seed {seed}: {v}" for v in r.violations if "missed it" in v]
    return found


def test_the_simulator_catches_reads_that_wait_only_for_earlier_persists(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read, "barriers_to_wait", lambda at_start, now: at_start)
    assert _read_misses(), f"the reverted read barrier went unnoticed in {len(SEEDS)} seeds"


def test_the_same_seeds_pass_with_the_fix() -> None:
    assert _read_misses() == []
