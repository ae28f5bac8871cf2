"""A handoff is claimed exactly once across three real processes: concurrent
``GET /handoff`` through every node hands it to exactly one caller, also
while the handoff mailbox's owner is paused (SIGSTOP) and another member
takes the mailbox over, and every node ends holding that one claim."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from common.handoffs import box_key, box_project
from federation.membership import Membership
from tests.cluster.harness import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

P = {"workspace": "default", "project": "proj-h"}
CALLERS_PER_NODE = 3


def write(c: Cluster, nid: str, body: str) -> str:
    end = time.monotonic() + 15
    while True:
        code, out = c.call(nid, "POST", "/handoff", {**P, "body": body},
                           headers={"Idempotency-Key": str(uuid.uuid5(uuid.NAMESPACE_URL, body))},
                           timeout=10)
        if code == 201:
            return str(out["handoff_id"])
        assert code == 503 and time.monotonic() < end, out
        time.sleep(0.2)


def get(c: Cluster, nid: str) -> dict[str, Any] | None:
    """One session start: GET /handoff under one request id, retried on 503
    (a takeover in progress) with that id, so a lost answer is asked again."""
    rid = f"start-{uuid.uuid4()}"
    end = time.monotonic() + 20
    path = f"/handoff?workspace={P['workspace']}&project={P['project']}&request_id={rid}"
    while True:
        try:
            code, out = c.call(nid, "GET", path, timeout=10)
        except OSError:
            code, out = 0, {}
        if code == 200:
            return out["handoff"]  # type: ignore[no-any-return]
        assert code in (0, 503), out
        assert time.monotonic() < end, f"GET /handoff kept failing on {nid}: {code} {out}"
        time.sleep(0.2)


def race(c: Cluster, nodes: list[str]) -> list[dict[str, Any]]:
    """Every node's callers at once; the handoffs they were given."""
    callers = [nid for nid in nodes for _ in range(CALLERS_PER_NODE)]
    with ThreadPoolExecutor(len(callers)) as pool:
        got = list(pool.map(lambda nid: get(c, nid), callers))
    return [h for h in got if h is not None]


def test_concurrent_session_starts_get_the_handoff_once(cluster: Cluster) -> None:
    code, out = cluster.call("node1", "POST", "/api/v1/sessions", {**P, "harness": "codex"})
    assert code == 201, out
    owner = Membership(cluster.ids[0], cluster.ids).rendezvous(
        box_key(P["workspace"], P["project"]))[0]
    claimed: list[str] = []
    for i, nid in enumerate(cluster.ids * 2):
        hid = write(cluster, nid, f"round {i}: pick up where I stopped")
        won = race(cluster, cluster.ids)
        assert [h["id"] for h in won] == [hid], won
        claimed.append(hid)

    # the owner paused past every timeout: the others take over, still once
    others = [n for n in cluster.ids if n != owner]
    hid = write(cluster, others[0], "written before the owner stopped")
    cluster.pause(owner)
    try:
        time.sleep(1.5)
        won = race(cluster, others)
        assert [h["id"] for h in won] == [hid], won
        claimed.append(hid)
    finally:
        cluster.resume(owner)
    # the old owner, back with a stale view, hands nothing out again
    assert race(cluster, cluster.ids) == []

    cluster.wait_converged(timeout=30)
    box = box_project(P["project"])
    for nid in cluster.ids:
        code, page = cluster.call(nid, "GET", f"/handoff?{_q(P)}&inbox_only=1")
        assert code == 200 and page["pending_message_count"] == 0
        states = _states(cluster, nid, box)
        assert states == {h: "claimed" for h in claimed}, (nid, states)


def _q(scope: dict[str, str]) -> str:
    return "&".join(f"{k}={v}" for k, v in scope.items())


def _states(c: Cluster, nid: str, box: str) -> dict[str, str]:
    """Each handoff's state in ``nid``'s own database (read-only, beside the process)."""
    import sqlite3

    db = sqlite3.connect(f"file:{c.procs[nid].db}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT id, state FROM messages WHERE to_workspace = ? AND "
                          "to_project = ?", (P["workspace"], box)).fetchall()
    finally:
        db.close()
    return {str(r[0]): str(r[1]) for r in rows}
