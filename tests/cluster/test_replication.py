"""Three real daemons: quorum writes, read-your-writes from any node,
anti-entropy after a kill -9, and what a client sees when W is not met."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from ai_memory import AiMemoryClient

from tests.cluster.harness import Cluster
from tests.cluster.proxy import REFUSE

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def notify(c: Cluster, nid: str, sender: str, target: str, title: str,
           key: str | None = None) -> tuple[int, dict]:
    headers = {"X-Agent-Id": sender}
    if key:
        headers["Idempotency-Key"] = key
    return c.call(nid, "POST", "/api/v1/notify",
                  {"target_agent_id": target, "title": title, "payload": f"body of {title}"},
                  headers=headers)


def inbox_ids(c: Cluster, nid: str, agent: str, consistency: str = "quorum") -> list[str]:
    code, body = c.call(nid, "GET", f"/api/v1/inbox?agent_id={agent}&unread_only=false"
                        f"&limit=500&consistency={consistency}", headers={"X-Agent-Id": agent})
    assert code == 200, body
    return [m["id"] for m in body["messages"]]


def test_sdk_notify_on_one_node_is_in_inbox_on_another(cluster: Cluster) -> None:
    with AiMemoryClient(base_url=cluster.url("node1"), agent_id="alice") as alice:
        sent = alice.notify({"target_agent_id": "bob", "title": "OKR review",
                             "payload": "please add your input", "priority": 7})
    assert sent["from"] == "alice"
    with AiMemoryClient(base_url=cluster.url("node2"), agent_id="bob") as bob:
        msgs = bob.inbox(agent_id="bob", unread_only=True)
    assert [m["id"] for m in msgs] == [sent["id"]]
    assert msgs[0]["from"] == "alice" and msgs[0]["title"] == "OKR review"
    with AiMemoryClient(base_url=cluster.url("node3"), agent_id="carol") as carol:
        assert carol.inbox(agent_id="carol") == []
    # Carol cannot read Bob's inbox on any node.
    code, _ = cluster.call("node3", "GET", "/api/v1/inbox?agent_id=bob",
                           headers={"X-Agent-Id": "carol"})
    assert code == 403


def test_read_your_writes_from_every_node(cluster: Cluster) -> None:
    for i, nid in enumerate(cluster.ids * 3):
        code, body = notify(cluster, nid, "alice", "bob", f"t{i}")
        assert code == 201, body
        reader = cluster.ids[(i + 1) % 3]
        assert body["id"] in inbox_ids(cluster, reader, "bob")


def test_mark_read_replicates_and_never_reverts(cluster: Cluster) -> None:
    code, body = notify(cluster, "node1", "alice", "bob", "read me")
    assert code == 201
    code, out = cluster.call("node2", "POST", "/api/v1/inbox/read",
                             {"agent_id": "bob", "ids": [body["id"]]},
                             headers={"X-Agent-Id": "bob"})
    assert code == 200 and out["marked"] == 1
    for nid in cluster.ids:
        code, box = cluster.call(nid, "GET", "/api/v1/inbox?agent_id=bob&unread_only=true",
                                 headers={"X-Agent-Id": "bob"})
        assert box["count"] == 0, (nid, box)


def test_quorum_not_met_then_spreads(cluster: Cluster) -> None:
    for dst in ("node2", "node3"):
        cluster.net.set("node1", dst, REFUSE)
    code, body = notify(cluster, "node1", "alice", "bob", "lonely", key="k-lonely")
    assert code == 503
    assert body["error"] == "quorum_not_met" and body["got"] == 1 and body["needed"] == 2
    assert body["reason"] in ("unreachable", "timeout")
    cluster.net.heal()
    cluster.wait_converged(timeout=20)
    ids = inbox_ids(cluster, "node3", "bob", consistency="local")
    assert len(ids) == 1
    # The client retries with the same Idempotency-Key: no second record.
    code, again = notify(cluster, "node2", "alice", "bob", "lonely", key="k-lonely")
    assert code == 201 and again["id"] == ids[0]
    cluster.wait_converged(timeout=20)
    assert inbox_ids(cluster, "node1", "bob", consistency="local") == ids


def test_kill9_during_write_burst_loses_nothing_acknowledged(cluster: Cluster) -> None:
    acked: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(k: int) -> None:
        i = 0
        while not stop.is_set() and i < 400:
            nid = ("node1", "node3")[i % 2]
            try:
                code, body = notify(cluster, nid, "alice", f"bob{k}", f"w{k}-{i}",
                                    key=str(uuid.uuid4()))
            except OSError:
                code = 0
            if code == 201:
                with lock:
                    acked.append(body["id"])
            i += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    cluster.kill9("node2")
    time.sleep(1.0)
    cluster.restart("node2")
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert len(acked) > 100
    took = cluster.wait_converged(timeout=30)
    print(f"converged {took:.2f}s after the burst; {len(acked)} acknowledged writes")
    for nid in cluster.ids:
        held = set()
        for k in range(4):
            held.update(inbox_ids(cluster, nid, f"bob{k}", consistency="local"))
        missing = set(acked) - held
        assert not missing, f"{nid} lost {len(missing)} acknowledged writes"


def test_node_down_everything_keeps_working(cluster: Cluster) -> None:
    cluster.kill9("node3")
    code, body = notify(cluster, "node1", "alice", "bob", "still here")
    assert code == 201
    assert body["id"] in inbox_ids(cluster, "node2", "bob")


def test_peerless_nodes_accept_pushes_from_a_node_with_peers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The upstream chaos harness starts node1 with peers and node2/node3
    with none; node2 and node3 must accept what node1 pushes."""
    import subprocess
    import sys

    from tests.cluster.harness import ROOT, free_port, http

    ports = [free_port() for _ in range(3)]
    procs = []
    try:
        for i, port in enumerate(ports):
            cmd = [sys.executable, "-m", "cli", "serve", "--port", str(port),
                   "--db", str(tmp_path / f"n{i}.db")]
            if i == 0:
                cmd += ["--quorum-writes", "2", "--initial-cluster-state", "new", "--quorum-peers",
                        ",".join(f"http://127.0.0.1:{p}" for p in ports[1:])]
            procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        for port in ports:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if http("GET", f"http://127.0.0.1:{port}/api/v1/health", timeout=1)[0] == 200:
                        break
                except OSError:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
        code, body = http("POST", f"http://127.0.0.1:{ports[0]}/api/v1/notify",
                          {"target_agent_id": "bob", "title": "t", "payload": "p"},
                          {"X-Agent-Id": "alice"})
        assert code == 201, body
        for port in ports[1:]:
            deadline = time.monotonic() + 10
            while True:
                code, box = http("GET", f"http://127.0.0.1:{port}/api/v1/inbox?agent_id=bob",
                                 headers={"X-Agent-Id": "bob"})
                if box.get("count") == 1:
                    break
                assert time.monotonic() < deadline, box
                time.sleep(0.1)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)


def test_mismatched_membership_is_detected_and_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """node3 believes in a fourth member: the others flag it and stop
    exchanging data with it; status and metrics say so."""
    import subprocess
    import sys

    from tests.cluster.harness import ROOT, free_port, http

    ports = {f"node{i}": free_port() for i in (1, 2, 3)}
    url = {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}
    peers = {
        "node1": [f"node2={url['node2']}", f"node3={url['node3']}"],
        "node2": [f"node1={url['node1']}", f"node3={url['node3']}"],
        "node3": [f"node1={url['node1']}", f"node2={url['node2']}", "node4=http://127.0.0.1:9"],
    }
    procs = []
    try:
        for nid, port in ports.items():
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "cli", "serve", "--port", str(port), "--node-id", nid,
                 "--db", str(tmp_path / f"{nid}.db"), "--quorum-peers", ",".join(peers[nid]),
                 "--catchup-interval-secs", "0.3", "--initial-cluster-state", "new"],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 20
        while True:
            try:
                code, status = http("GET", url["node1"] + "/api/v1/cluster/status", timeout=1)
                if code == 200 and status["peers"]["node3"]["membership_mismatch"]:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "mismatch never reported"
            time.sleep(0.1)
        assert status["peers"]["node2"]["membership_mismatch"] is False
        _, metrics = http("GET", url["node1"] + "/api/v1/metrics")
        assert 'ai_memory_membership_mismatch_total{peer="node3"}' in metrics
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
