"""Leases through crashes, on three real processes (issue 26).

A claimer process pops with a lease and renews it, then is killed with
SIGKILL mid-lease; the mailbox's owner node is killed too, so the member
that takes the mailbox over must find the lease and expire it. Workers pop
with leases through every node while this happens and complete what they
get. Every message ends completed once; the killed claimer's message is
handed out exactly once more (delivery 2); its token is refused afterwards;
and no two holders ever overlap: each claim of a message is answered only
after the previous holder's last deadline (all processes share this
machine's clock).
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.lease_chaos import CLAIMER
from tests.cluster.harness import Cluster
from tests.cluster.test_claims import A, B, owner_order, send

pytestmark = [pytest.mark.cluster, pytest.mark.slow]



def _ms(iso: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def test_a_killed_claimer_and_owner_redeliver_once_and_never_two_holders(
        cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    for scope, harness in ((A, "kimi"), (B, "claude-code")):
        code, body = c.call("node1", "POST", "/api/v1/sessions", {**scope, "harness": harness})
        assert code == 201, body
    sent = []
    for i in range(8):
        code, out = send(c, c.ids[i % 3], f"job-{i}")
        assert code == 201, out
        sent.append(out["message_id"])
    owner = owner_order(c, B)[0]
    entry = next(n for n in c.ids if n != owner)
    log = tmp_path / "claimer.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", CLAIMER, c.url(entry), str(log),
                             B["project"], "3", "1"])
    try:
        deadline = time.monotonic() + 15
        while len(log.read_text().splitlines() if log.exists() else []) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "claimer stalled"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    doomed = lines[0]
    doomed_until = max(_ms(x["lease_until"]) for x in lines)
    c.kill9(owner)  # the lease's owner goes too: another member must expire it

    # claims[mid] = [(answered at ms, token, last known deadline ms)]
    claims: dict[str, list[list[Any]]] = {doomed["id"]: [[_ms(doomed["claimed_at"]),
                                                          doomed["claim_token"], doomed_until]]}
    completed: dict[str, int] = {}
    up = [n for n in c.ids if n != owner]
    restarted = False
    deadline = time.monotonic() + 60
    while len(completed) < len(sent):
        assert time.monotonic() < deadline, (completed, claims)
        if not restarted and time.monotonic() > deadline - 50:
            c.start(owner)  # back, while the others work
            up, restarted = c.ids, True
        nid = up[len(completed) % len(up)]
        code, out = c.call(nid, "POST", "/api/v1/messages/pop",
                           {**B, "lease_seconds": 20}, headers={"X-Agent-Id": "worker"})
        if code != 200 or out.get("message") is None:
            time.sleep(0.2)  # nothing pending yet (the doomed lease has not run out)
            continue
        msg = out["message"]
        now = time.time() * 1000
        claims.setdefault(msg["id"], []).append([now, msg["claim_token"],
                                                 _ms(msg["lease_until"])])
        code, done = c.call(nid, "POST", "/api/v1/messages/complete",
                            {"message_id": msg["id"], "result": "done",
                             "claim_token": msg["claim_token"]},
                            headers={"X-Agent-Id": "worker"})
        assert code == 200, done
        completed[msg["id"]] = completed.get(msg["id"], 0) + 1

    assert sorted(completed) == sorted(sent) and set(completed.values()) == {1}
    assert len(claims[doomed["id"]]) == 2, claims[doomed["id"]]  # redelivered once
    for mid, held in claims.items():
        assert len(held) == (2 if mid == doomed["id"] else 1), (mid, held)
        for (_, _, until), (answered, _, _) in itertools.pairwise(held):
            assert answered >= until, f"{mid}: two live holders {held}"
    if not restarted:
        c.start(owner)
    code, out = c.call(entry, "POST", "/api/v1/messages/renew",
                       {"message_id": doomed["id"], "claim_token": doomed["claim_token"]})
    assert code == 409 and out["code"] == "lease_lost", out
    for nid in c.ids:
        c.wait_serving(nid)
    code, outbox = c.call("node1", "GET", "/api/v1/messages?workspace=default&project=proj-a"
                                          "&box=outbox&all=true")
    row = next(m for m in outbox["messages"] if m["id"] == doomed["id"])
    assert (row["deliveries"], row["completion"]["result"]) == (2, "done"), row
