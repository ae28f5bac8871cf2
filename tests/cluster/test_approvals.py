"""The approval queue across three real processes: a real admission hook on
loopback holds sends for an approver; approvals and rejections of the same
message raced through two different nodes are decided exactly once, and
a pending approval survives kill -9 of the mailbox's owner."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import Cluster
from tests.cluster.test_claims import A, B, owner_order, setup_projects

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
APPROVALS = f"/api/v1/approvals?workspace={B['workspace']}&project={B['project']}"


class _Hook(BaseHTTPRequestHandler):
    """A deciding hook: every send is held for an approver."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = json.dumps({"decision": "pending", "reason": "release manager"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def held_cluster(tmp_path: Path) -> Iterator[Cluster]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    conf = tmp_path / "node.toml"
    conf.write_text("[webhooks]\nallow_loopback_webhooks = true\n\n[[mail.admission]]\n"
                    f'url = "http://127.0.0.1:{server.server_port}/decide"\n'
                    f'secret = "s"\nproject = "{B["project"]}"\n')
    c = Cluster(tmp_path)
    for p in c.procs.values():
        p.extra_env["AI_MEMORY_CONFIG"] = str(conf)
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()
        server.shutdown()
        server.server_close()


def send(c: Cluster, nid: str, body: str) -> str:
    code, reply = c.call(nid, "POST", "/api/v1/messages", {
        "to_workspace": B["workspace"], "to_project": B["project"],
        "from_workspace": A["workspace"], "from_project": A["project"], "body": body},
        headers={"Idempotency-Key": body})
    assert code == 201 and reply["state"] == "awaiting_approval", reply
    return str(reply["message_id"])


def until_answered(fn: Any, deadline_s: float = 20.0) -> tuple[int, Any]:
    """Retry through 503s and transport errors (a failover under way)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            code, body = fn()
        except OSError:
            code, body = 0, {}
        if code not in (0, 503):
            return code, body
        assert time.monotonic() < end, f"kept failing: {code} {body}"
        time.sleep(0.2)


def pop(c: Cluster, nid: str) -> tuple[int, Any]:
    return c.call(nid, "POST", "/api/v1/messages/pop", {**B, "request_id": str(uuid.uuid4())},
                  timeout=5)


def test_two_approvers_on_two_nodes_race_and_exactly_one_decides(held_cluster: Cluster) -> None:
    c = held_cluster
    setup_projects(c)
    owner, second, third = owner_order(c, B)
    ids = [send(c, second, f"race-{i}") for i in range(6)]
    results: dict[str, list[tuple[str, int, Any]]] = {mid: [] for mid in ids}

    def decide(nid: str, mid: str, verb: str) -> None:
        code, body = until_answered(lambda: c.call(
            nid, "POST", f"/api/v1/approvals/{mid}/{verb}", {"reason": f"{verb} via {nid}"}))
        results[mid].append((verb, code, body))

    for mid in ids:  # an approval through one node, a rejection through another, at once
        threads = [threading.Thread(target=decide, args=(second, mid, "approve")),
                   threading.Thread(target=decide, args=(third, mid, "reject"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    winners: dict[str, str] = {}
    for mid, outcomes in results.items():
        won = [(verb, body) for verb, code, body in outcomes if code == 200]
        lost = [body for verb, code, body in outcomes if code != 200]
        assert len(won) == 1 and len(lost) == 1, outcomes
        verb, body = won[0]
        winners[mid] = "approved" if verb == "approve" else "rejected"
        assert body["decision"] == winners[mid]
        assert lost[0]["code"] == "already_decided" and lost[0]["decision"] == winners[mid]
    c.wait_converged()
    for nid in c.ids:  # every member shows the one decision
        code, hist = c.call(nid, "GET", APPROVALS)
        assert code == 200 and hist["count"] == 0
    approved = [mid for mid in ids if winners[mid] == "approved"]
    popped = []
    while True:
        code, got = until_answered(lambda: pop(c, owner))
        assert code == 200, got
        if got["message"] is None:
            break
        popped.append(got["message"]["id"])
    assert popped == approved  # in send order; a rejected one is never claimable


def test_a_pending_approval_survives_kill_9_of_the_owner(held_cluster: Cluster) -> None:
    c = held_cluster
    setup_projects(c)
    owner, second, third = owner_order(c, B)
    first = send(c, second, "before-the-crash")
    later = send(c, second, "sent-second")
    c.kill9(owner)

    code, listed = until_answered(lambda: c.call(third, "GET", APPROVALS))
    assert code == 200 and [m["id"] for m in listed["messages"]] == [first, later]
    code, got = until_answered(lambda: pop(c, third))
    assert code == 200 and got["message"] is None  # still held after the failover
    code, done = until_answered(lambda: c.call(
        third, "POST", f"/api/v1/approvals/{later}/approve", {}))
    assert code == 200 and done["decision"] == "approved", done
    c.restart(owner)  # back on its old disk: it must not undo or repeat the decision
    code, again = until_answered(lambda: c.call(
        owner, "POST", f"/api/v1/approvals/{later}/reject", {}))
    assert code == 409 and again["decision"] == "approved", again
    code, done = until_answered(lambda: c.call(
        owner, "POST", f"/api/v1/approvals/{first}/approve", {}))
    assert code == 200, done
    # The first send takes its original place ahead of the one approved before it.
    ids = []
    for _ in range(3):
        code, got = until_answered(lambda: pop(c, second))
        assert code == 200
        ids.append(None if got["message"] is None else got["message"]["id"])
    assert ids == [first, later, None]
