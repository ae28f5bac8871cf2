"""A member that lost its disk rejoins under its old id, on real processes.

The probe of issue 11: with sends and pops running through every node, one
member's database is wiped (kill -9, files deleted) and it is restarted
under the same id; later the mailbox owner is killed, so a takeover needs
the wiped member's vote. Before recovery existed this gave messages claimed
twice. Now the wiped member is seeded from a peer's copy, gives no promise
or accept until it has every member's state, and then votes again: every
message is claimed exactly once and none is lost.

``AI_MEMORY_AMNESIA_RUNS=20`` repeats the whole sequence.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.cluster.harness import LANES, Cluster
from tests.cluster.test_claims import B, History, owner_order, pop, send, setup_projects

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(300)]

RUNS = int(os.environ.get("AI_MEMORY_AMNESIA_RUNS", "1"))


class Poppers:
    """A popper and a sender per node, retrying a pop's request id on 503
    (the documented client rule), recording every acknowledged claim."""

    def __init__(self, c: Cluster, h: History) -> None:
        self.c, self.h = c, h
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._pop, args=(nid,), daemon=True)
                         for nid in c.ids]
        self._threads += [threading.Thread(target=self._send, args=(nid,), daemon=True)
                          for nid in c.ids]
        self.sent = 0

    def start(self) -> Poppers:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        if self.errors:
            raise self.errors[0]

    def _pop(self, nid: str) -> None:
        rid = str(uuid.uuid4())
        while not self._stop.is_set():
            try:
                code, body = pop(self.c, nid, rid, timeout=15)
            except OSError:
                time.sleep(0.1)  # node down: retry the same request id
                continue
            try:
                with self._lock:
                    self.h.record_pop(rid, code, body)
            except AssertionError as exc:
                self.errors.append(exc)
                return
            if code == 200:
                rid = str(uuid.uuid4())  # decided: the next pop is a new request
                if body.get("message") is None:
                    time.sleep(0.05)
            else:
                time.sleep(0.1)

    def _send(self, nid: str) -> None:
        i = 0
        while not self._stop.is_set():
            tag = f"{nid}-{uuid.uuid4().hex[:8]}"
            for _ in range(50):  # retry the same Idempotency-Key until decided
                try:
                    code, body = send(self.c, nid, f"amnesia-{tag}-{i}", timeout=15)
                except OSError:
                    code, body = 0, {}
                if code == 201:
                    with self._lock:
                        self.h.sent.add(body["message_id"])
                        self.sent += 1
                    break
                if code == 429 or self._stop.is_set():
                    break
                time.sleep(0.2)
            i += 1
            time.sleep(0.02)


def wipe(c: Cluster, nid: str) -> None:
    """kill -9, then every database file of the node (each lane's) deleted."""
    c.kill9(nid)
    for db in c.db_files(nid):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)


def wait_recovered(c: Cluster, nid: str, timeout: float = 60.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if not any(c.status(nid, lane)["recovering"] for lane in range(c.lanes)):
                return time.monotonic() - start
        except (OSError, AssertionError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{nid} still recovering after {timeout}s: {c.logs()}")


def one_round(c: Cluster, round_no: int) -> dict[str, float]:
    h = History()
    owner, second, third = owner_order(c, B)
    wiped = second if round_no % 2 == 0 else owner  # the owner itself in odd rounds
    poppers = Poppers(c, h).start()
    try:
        time.sleep(1.5)
        wipe(c, wiped)
        time.sleep(0.5)
        c.restart(wiped)
        seeded_in = wait_recovered(c, wiped)
        time.sleep(1.0)
        # A takeover now needs the wiped member's vote (W = majority of 3).
        victim = owner if wiped != owner else third
        c.kill9(victim)
        time.sleep(2.0)
        c.restart(victim)
        time.sleep(1.5)
    finally:
        poppers.stop()
    c.wait_converged(timeout=60)
    h.drain(c, second)
    h.check_final(c)
    return {"recovered_s": seeded_in, "sent": float(len(h.sent)), "claimed": float(len(h.claims))}


@LANES
def test_a_wiped_member_rejoins_without_double_or_lost_claims(cluster: Cluster) -> None:
    setup_projects(cluster)
    figures = [one_round(cluster, i) for i in range(RUNS)]
    print("amnesia rounds:", figures)
    for lane in range(cluster.lanes):
        assert cluster.status(cluster.ids[0], lane)["recovering"] is False
