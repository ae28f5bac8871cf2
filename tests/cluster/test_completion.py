"""Completion and threads across three real processes: mail sent through
node1, claimed through node2, completed through node3, and the sender's
outbox read through node1 shows the outcome at once (the read quorum) and,
once replicated, from node1's own store (``consistency=local``). A second
completion through another node is refused (it sees the first), and
every node ends showing the same completion and the same thread."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.cluster.harness import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

WS = "default"
WORKER = {"X-Agent-Id": "worker"}


def outbox_row(c: Cluster, nid: str, mid: str, local: bool = False) -> dict[str, Any]:
    path = f"/api/v1/messages?workspace={WS}&project=asker&box=outbox&all=true"
    code, out = c.call(nid, "GET", path + ("&consistency=local" if local else ""))
    assert code == 200, out
    return next(m for m in out["messages"] if m["id"] == mid)


def test_a_completion_through_one_node_is_in_the_outbox_on_another(cluster: Cluster) -> None:
    for proj, harness in (("asker", "kimi"), ("doer", "codex")):
        code, out = cluster.call("node1", "POST", "/api/v1/sessions",
                                 {"workspace": WS, "project": proj, "harness": harness})
        assert code == 201, out
    code, sent = cluster.call("node1", "POST", "/api/v1/messages", {
        "to_workspace": WS, "to_project": "doer", "from_workspace": WS,
        "from_project": "asker", "subject": "export", "body": "add paging"})
    assert code == 201, sent
    mid = sent["message_id"]
    code, popped = cluster.call("node2", "POST", "/api/v1/messages/pop",
                                {"workspace": WS, "project": "doer", "request_id": "p-1"},
                                headers=WORKER)
    assert code == 200 and popped["message"]["id"] == mid, popped
    code, out = cluster.call("node3", "POST", "/api/v1/messages/complete",
                             {"message_id": mid, "result": "done", "note": "paged by cursor"},
                             headers=WORKER)
    assert code == 200, out

    row = outbox_row(cluster, "node1", mid)
    assert row["state"] == "claimed"
    assert row["completion"]["result"] == "done"
    assert row["completion"]["note"] == "paged by cursor"

    code, out = cluster.call("node2", "POST", "/api/v1/messages/complete",
                             {"message_id": mid, "result": "blocked"}, headers=WORKER)
    assert code == 409, out  # node2 hears the first completion before it decides
    code, out = cluster.call("node1", "POST", "/api/v1/messages/complete",
                             {"message_id": mid, "result": "done"},
                             headers={"X-Agent-Id": "someone-else"})
    assert code == 403, out

    code, reply = cluster.call("node3", "POST", "/api/v1/messages/reply",
                               {"message_id": mid, "body": "done, see the note"})
    assert code == 201 and reply["thread_id"] == mid, reply

    deadline = time.monotonic() + 15
    while True:  # replication brings every node the same record
        rows = [outbox_row(cluster, nid, mid, local=True) for nid in cluster.ids]
        code, threads = zip(*[cluster.call(
            nid, "GET", f"/api/v1/messages?workspace={WS}&project=asker&thread_id={mid}"
                        "&consistency=local") for nid in cluster.ids], strict=True)
        same = all(r["completion"] == rows[0]["completion"] for r in rows)
        threaded = all([m["id"] for m in t["messages"]] == [reply["message_id"]] for t in threads)
        if same and threaded and rows[0]["completion"] is not None:
            break
        assert time.monotonic() < deadline, (rows, threads)
        time.sleep(0.2)
