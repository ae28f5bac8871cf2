"""Claim-once across real processes: owner failover after SIGSTOP, a
partitioned owner, kill -9 of the owner, and clock skew. Every run records
the acknowledged pops and checks that no message was handed out twice and
that every sent message is claimed exactly once in the end."""

from __future__ import annotations

import time
import uuid

import pytest

from common.ops import mailbox_key
from federation.membership import Membership
from tests.cluster.harness import LANES, Cluster
from tests.cluster.proxy import BLACKHOLE

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

A = {"workspace": "default", "project": "proj-a"}
B = {"workspace": "default", "project": "proj-b"}


def setup_projects(c: Cluster) -> None:
    for scope, harness in ((A, "kimi"), (B, "claude-code")):
        code, body = c.call("node1", "POST", "/api/v1/sessions", {**scope, "harness": harness})
        assert code == 201, body


def owner_order(c: Cluster, scope: dict[str, str]) -> list[str]:
    return Membership(c.ids[0], c.ids).rendezvous(mailbox_key(scope["workspace"], scope["project"]))


def send(c: Cluster, nid: str, body: str, timeout: float = 10.0) -> tuple[int, dict]:
    return c.call(nid, "POST", "/api/v1/messages", {
        "to_workspace": B["workspace"], "to_project": B["project"],
        "from_workspace": A["workspace"], "from_project": A["project"], "body": body},
        headers={"Idempotency-Key": body}, timeout=timeout)


def pop(c: Cluster, nid: str, request_id: str, timeout: float = 10.0) -> tuple[int, dict]:
    return c.call(nid, "POST", "/api/v1/messages/pop", {**B, "request_id": request_id},
                  timeout=timeout)


class History:
    def __init__(self) -> None:
        self.sent: set[str] = set()
        self.claims: dict[str, str] = {}  # message id -> request id

    def record_pop(self, request_id: str, code: int, body: dict) -> None:
        if code == 200 and body.get("message"):
            mid = body["message"]["id"]
            prev = self.claims.get(mid)
            assert prev in (None, request_id), f"message {mid} claimed twice: {prev}, {request_id}"
            self.claims[mid] = request_id

    def drain(self, c: Cluster, nid: str) -> None:
        for _ in range(len(self.sent) + 5):
            rid = str(uuid.uuid4())
            code, body = pop(c, nid, rid)
            assert code == 200, body
            if body["message"] is None:
                return
            self.record_pop(rid, code, body)

    def check_final(self, c: Cluster) -> None:
        # Claims made while draining were acknowledged by a majority; let the
        # last member catch up before reading each node's own state.
        c.wait_converged(timeout=30)
        assert set(self.claims) == self.sent, (
            f"unclaimed: {self.sent - set(self.claims)}, unknown: {set(self.claims) - self.sent}")
        for nid in c.ids:
            _, listing = c.call(nid, "GET", "/api/v1/messages?workspace=default&project=proj-b"
                                   "&consistency=local")
            assert listing["count"] == 0, (nid, listing)


def send_batch(c: Cluster, h: History, nid: str, n: int, tag: str) -> None:
    for i in range(n):
        code, body = send(c, nid, f"{tag}-{i}")
        assert code == 201, body
        h.sent.add(body["message_id"])


def retry_pop(c: Cluster, h: History, nid: str, deadline_s: float = 15.0) -> dict:
    """Pop with one request id, retrying on 503 (failover in progress)."""
    rid = str(uuid.uuid4())
    end = time.monotonic() + deadline_s
    while True:
        try:
            code, body = pop(c, nid, rid, timeout=5)
        except OSError:
            code, body = 0, {}
        if code == 200:
            h.record_pop(rid, code, body)
            return body
        assert code in (0, 503), body
        assert time.monotonic() < end, f"pop kept failing: {code} {body}"
        time.sleep(0.2)


@LANES
def test_owner_paused_past_timeouts_fails_over(cluster: Cluster) -> None:
    setup_projects(cluster)
    h = History()
    owner, second, third = owner_order(cluster, B)
    send_batch(cluster, h, second, 10, "before")
    for _ in range(3):
        retry_pop(cluster, h, second)
    cluster.pause(owner)
    try:
        time.sleep(1.5)
        send_batch_retry(cluster, h, third, 5, "during")
        for _ in range(6):
            assert retry_pop(cluster, h, third)["message"] is not None
    finally:
        cluster.resume(owner)
    # The old owner comes back with a stale view: it must not hand out
    # anything a second time.
    for _ in range(3):
        retry_pop(cluster, h, owner)
    cluster.wait_converged(timeout=30)
    h.drain(cluster, second)
    h.check_final(cluster)


def send_batch_retry(c: Cluster, h: History, nid: str, n: int, tag: str) -> None:
    for i in range(n):
        end = time.monotonic() + 15
        while True:
            code, body = send(c, nid, f"{tag}-{i}")
            if code == 201:
                h.sent.add(body["message_id"])
                break
            assert code == 503 and time.monotonic() < end, body
            time.sleep(0.2)


@LANES
def test_partitioned_owner_minority_refuses_majority_serves(cluster: Cluster) -> None:
    setup_projects(cluster)
    h = History()
    owner, second, third = owner_order(cluster, B)
    send_batch(cluster, h, owner, 12, "m")
    retry_pop(cluster, h, owner)
    cluster.net.isolate(owner, BLACKHOLE)
    try:
        code, body = pop(cluster, owner, str(uuid.uuid4()), timeout=20)
        assert code == 503, body
        for _ in range(5):
            assert retry_pop(cluster, h, second)["message"] is not None
        for _ in range(2):
            assert retry_pop(cluster, h, third)["message"] is not None
    finally:
        cluster.net.heal()
    cluster.wait_converged(timeout=30)
    h.drain(cluster, owner)
    h.check_final(cluster)


def test_owner_kill9_and_restart(cluster: Cluster) -> None:
    setup_projects(cluster)
    h = History()
    owner, second, _third = owner_order(cluster, B)
    send_batch(cluster, h, second, 8, "k")
    retry_pop(cluster, h, second)
    cluster.kill9(owner)
    for _ in range(3):
        retry_pop(cluster, h, second)
    send_batch_retry(cluster, h, second, 3, "after")
    cluster.restart(owner)
    for _ in range(2):
        retry_pop(cluster, h, owner)
    cluster.wait_converged(timeout=30)
    h.drain(cluster, second)
    h.check_final(cluster)


def test_retried_pop_after_lost_reply_returns_same_message(cluster: Cluster) -> None:
    setup_projects(cluster)
    h = History()
    send_batch(cluster, h, "node1", 3, "r")
    rid = "req-" + uuid.uuid4().hex
    code, first = pop(cluster, "node2", rid)
    code2, again = pop(cluster, "node3", rid)
    assert code == code2 == 200
    assert first["message"]["id"] == again["message"]["id"]


def test_clock_skew_of_minutes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path)
    c.procs["node3"].extra_env["AI_MEMORY_DEBUG_CLOCK_OFFSET_MS"] = str(5 * 60 * 1000)
    c.procs["node1"].extra_env["AI_MEMORY_DEBUG_CLOCK_OFFSET_MS"] = str(-3 * 60 * 1000)
    try:
        c.start()
        setup_projects(c)
        h = History()
        for nid in c.ids:
            send_batch(c, h, nid, 3, f"skew-{nid}")
        for nid in c.ids:
            retry_pop(c, h, nid)
        code, body = c.call("node3", "POST", "/api/v1/notify",
                            {"target_agent_id": "bob", "title": "from the future", "payload": "x"},
                            headers={"X-Agent-Id": "alice"})
        assert code == 201, body
        code, box = c.call("node1", "GET", "/api/v1/inbox?agent_id=bob",
                           headers={"X-Agent-Id": "bob"})
        assert [m["id"] for m in box["messages"]] == [body["id"]]
        c.wait_converged(timeout=30)
        h.drain(c, "node2")
        h.check_final(c)
    finally:
        c.stop()
