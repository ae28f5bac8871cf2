"""Forwarded mailbox requests ride the batched peer channel (issue 10).

On real processes: sends and pops that enter a node which does not own the
mailbox reach the owner as ``Forward`` messages on ``/peer/v1/msgs`` and
their answers come back as ``ForwardResult``; no ``/peer/v1/mailbox``
request is made once the peers speak protocol 3. The answers are the
owner's own: a retried pop's request id keeps its message, "nothing
pending" is an answer, and an error the owner raises (the mailbox's
pending cap) reaches the client with its status, code and details.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid

import pytest

from common import limits
from federation.messages import PROTOCOL_VERSION
from tests.cluster.harness import Cluster
from tests.cluster.test_claims import B, owner_order, pop, send, setup_projects

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _metric(c: Cluster, nid: str, pattern: str) -> float:
    with urllib.request.urlopen(c.url(nid) + "/api/v1/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(pattern + r"\s+([0-9.e+-]+)", text))


def _wait_protocol(c: Cluster, entry: str, owner: str, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if c.status(entry).get("peer_protocols", {}).get(owner, 0) >= PROTOCOL_VERSION:
            return
        time.sleep(0.1)
    raise AssertionError(f"{owner} never spoke protocol {PROTOCOL_VERSION} to {entry}")


MAILBOX_CALLS = r'ai_memory_http_request_seconds_count\{[^}]*route="/peer/v1/mailbox"[^}]*\}'


def test_forwards_and_answers_travel_on_the_batched_channel(cluster: Cluster) -> None:
    setup_projects(cluster)
    owner, entry, _ = owner_order(cluster, B)
    _wait_protocol(cluster, entry, owner)
    before = _metric(cluster, owner, MAILBOX_CALLS)
    forwards = _metric(cluster, entry, r'ai_memory_mailbox_forwards_total\{[^}]*\}')
    sent = []
    for i in range(20):
        code, body = send(cluster, entry, f"chan-{i}-{uuid.uuid4().hex[:6]}")
        assert code == 201, body
        sent.append(body["message_id"])
    got = []
    for _ in range(20):
        rid = str(uuid.uuid4())
        code, body = pop(cluster, entry, rid)
        assert code == 200 and body["message"], body
        again_code, again = pop(cluster, entry, rid)  # the same request id, the same message
        assert again_code == 200 and again["message"]["id"] == body["message"]["id"], again
        got.append(body["message"]["id"])
    assert got == sent  # FIFO, each exactly once
    code, body = pop(cluster, entry, str(uuid.uuid4()))
    assert code == 200 and body["message"] is None, body
    assert _metric(cluster, entry, r'ai_memory_mailbox_forwards_total\{[^}]*\}') >= forwards + 61
    assert _metric(cluster, owner, MAILBOX_CALLS) == before  # nothing on its own request


def test_an_owner_error_reaches_the_client_with_its_code(cluster: Cluster) -> None:
    setup_projects(cluster)
    owner, entry, _ = owner_order(cluster, B)
    _wait_protocol(cluster, entry, owner)
    for i in range(limits.mailbox_pending_max):
        code, body = send(cluster, owner, f"fill-{i}")
        assert code == 201, body
    code, body = send(cluster, entry, "one-too-many")
    assert code == 429, body
    assert body["code"] == "limit_exceeded" and body.get("limit") == "mailbox_pending_max", body
