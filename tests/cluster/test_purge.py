"""Purge across real processes (issue 27): three ``ai-memory serve`` on
loopback; a project purged through one node while another keeps sending to
it. Every node converges to the same mailbox, the purged messages (and the
project's memories) are gone everywhere, a pop after the purge returns
nothing, and of the sends that raced the purge only those the owner decided
after it remain, each claimed at most once."""

from __future__ import annotations

import threading
import time

import pytest

from tests.cluster.harness import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

A = {"workspace": "default", "project": "proj-a"}
B = {"workspace": "default", "project": "proj-b"}


def session(c: Cluster, nid: str, scope: dict[str, str], harness: str) -> None:
    code, body = c.call(nid, "POST", "/api/v1/sessions", {**scope, "harness": harness})
    assert code == 201, body


def send(c: Cluster, nid: str, key: str) -> tuple[int, dict]:
    return c.call(nid, "POST", "/api/v1/messages", {
        "to_workspace": B["workspace"], "to_project": B["project"],
        "from_workspace": A["workspace"], "from_project": A["project"], "body": key},
        headers={"Idempotency-Key": key})


def local_box(c: Cluster, nid: str) -> list[str]:
    code, body = c.call(nid, "GET", "/api/v1/messages?box=inbox&workspace=default"
                        "&project=proj-b&consistency=local&limit=200")
    assert code == 200, body
    return sorted(m["id"] for m in body["messages"])


def test_a_purge_on_one_node_converges_everywhere_beside_concurrent_sends(
        cluster: Cluster) -> None:
    c = cluster
    session(c, "node1", A, "kimi")
    session(c, "node1", B, "claude-code")
    old = []
    for i, nid in enumerate(("node1", "node2", "node3", "node1", "node2")):
        code, body = send(c, nid, f"old-{i}")
        assert code == 201, body
        old.append(body["message_id"])
    code, popped = c.call("node3", "POST", "/api/v1/messages/pop", {**B, "request_id": "r-old"})
    assert code == 200 and popped["message"]["id"] == old[0]
    code, mem = c.call("node1", "POST", "/api/v1/memories",
                       {"title": "b's note", "content": "x", "namespace": "default/proj-b"})
    assert code == 201, mem

    racing: list[tuple[int, dict]] = []
    stop = threading.Event()

    def sender() -> None:
        i = 0
        while not stop.is_set():
            racing.append(send(c, "node3", f"race-{i}"))
            i += 1
            time.sleep(0.005)

    t = threading.Thread(target=sender)
    t.start()
    time.sleep(0.2)
    code, purged = c.call("node2", "POST", "/api/v1/projects/default/proj-b/purge",
                          {"reason": "cluster test"})
    time.sleep(0.2)
    stop.set()
    t.join()
    assert code == 200, purged
    assert purged["memories_removed"] == 1 and purged["messages_removed"] >= len(old)

    # A pop after the purge was acknowledged returns nothing, on any node.
    for nid in c.ids:
        code, body = c.call(nid, "POST", "/api/v1/messages/pop", {**B})
        assert code == 200 and body["message"] is None, (nid, body)
    # The old claim's request id keeps its answer: never a newer message.
    code, body = c.call("node1", "POST", "/api/v1/messages/pop", {**B, "request_id": "r-old"})
    assert code == 200 and body["message"] is None, body

    c.wait_converged()
    for nid in c.ids:
        code, body = c.call(nid, "GET", f"/api/v1/memories/{mem['id']}")
        assert code == 404, (nid, body)
        code, body = c.call(nid, "GET", "/api/v1/projects")
        assert B["project"] not in {p["project"] for p in body["projects"]}, (nid, body)

    # The project comes back with a new session; every node shows one mailbox.
    session(c, "node1", B, "claude-code")
    code, after = send(c, "node2", "after-1")  # sent after the purge: it stays
    assert code == 201, after
    c.wait_converged()
    boxes = {nid: local_box(c, nid) for nid in c.ids}
    assert boxes["node1"] == boxes["node2"] == boxes["node3"], boxes
    acked = {b["message_id"] for code, b in racing if code == 201} | {after["message_id"]}
    assert after["message_id"] in boxes["node1"]
    assert not set(boxes["node1"]) & set(old), "a purged message came back"
    assert set(boxes["node1"]) <= acked, "a message nobody sent"
    # What remains is claimed once each; nothing purged is ever handed out.
    claimed: list[str] = []
    for i in range(len(boxes["node1"]) + 3):
        code, body = c.call(c.ids[i % 3], "POST", "/api/v1/messages/pop", {**B})
        assert code == 200, body
        if body["message"] is not None:
            claimed.append(body["message"]["id"])
    assert sorted(claimed) == boxes["node1"] and len(set(claimed)) == len(claimed)
    print(f"racing sends: {len(racing)} ({len(acked) - 1} acknowledged), "
          f"{len(boxes['node1']) - 1} decided after the purge and kept")


def test_the_cli_purges_through_one_node_and_every_node_agrees(cluster: Cluster) -> None:
    from click.testing import CliRunner

    from cli.main import cli

    c = cluster
    session(c, "node1", A, "kimi")
    session(c, "node2", B, "claude-code")
    code, body = send(c, "node1", "for-b")
    assert code == 201, body
    declined = CliRunner().invoke(cli, ["--url", c.url("node3"), "project", "purge",
                                        "default/proj-b"], input="n\n")
    assert declined.exit_code == 1
    assert len(local_box(c, "node2")) == 1  # nothing was purged
    done = CliRunner().invoke(cli, ["--url", c.url("node3"), "project", "purge",
                                    "default/proj-b", "--yes", "--reason", "cli"])
    assert done.exit_code == 0, done.output
    assert "purged default/proj-b: 1 messages" in done.output
    c.wait_converged()
    for nid in c.ids:
        code, body = c.call(nid, "GET", "/api/v1/projects")
        assert {p["project"] for p in body["projects"]} == {"proj-a"}, (nid, body)
        code, body = c.call(nid, "GET", "/api/v1/memories?namespace=_audit/purge")
        assert [m["metadata"]["purge"]["reason"] for m in body["memories"]] == ["cli"], nid
