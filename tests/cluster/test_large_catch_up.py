"""A member that missed more than one peer body's worth of writes catches
up: anti-entropy pushes, peer batches and all-keys pulls are bounded in
bytes (``limits.peer_batch_bytes_max``), not only in ops, so no push ever
exceeds what the receiver accepts (``limits.peer_body_max_bytes``)."""

from __future__ import annotations

import secrets
import time

import pytest

from common import limits
from tests.cluster.harness import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CONTENT_CHARS = 900_000  # one memory: just under a request's limit once in JSON


def _store(c: Cluster, nid: str, i: int) -> str:
    # One long token: FTS indexes it cheaply, and it does not compress.
    code, body = c.call(nid, "POST", "/api/v1/memories",
                        {"title": f"big {i}", "content": secrets.token_hex(CONTENT_CHARS // 2)},
                        headers={"X-Agent-Id": "archivist"}, timeout=30)
    assert code == 201, body
    return str(body["id"])


def _count_local(c: Cluster, nid: str) -> int:
    code, body = c.call(nid, "GET", "/api/v1/memories?limit=1000&consistency=local",
                        headers={"X-Agent-Id": "archivist"}, timeout=30)
    assert code == 200, body
    return len(body["memories"])


def test_a_member_that_missed_more_than_a_peer_body_catches_up(cluster: Cluster) -> None:
    n = limits.peer_body_max_bytes // (CONTENT_CHARS) + 8  # the missed ops exceed one body
    cluster.kill9("node3")
    ids = [_store(cluster, ("node1", "node2")[i % 2], i) for i in range(n)]
    cluster.restart("node3")
    took = cluster.wait_converged(timeout=90)
    # The version vectors count a pushed batch once it is handed to the
    # store; a local read sees it once committed (a 8 MiB batch: tens of ms).
    deadline = time.monotonic() + 30
    while (held := _count_local(cluster, "node3")) < len(ids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert held == len(ids)
    print(f"node3 caught up on {len(ids)} memories ({len(ids) * CONTENT_CHARS >> 20} MiB) "
          f"in {took:.1f} s")
