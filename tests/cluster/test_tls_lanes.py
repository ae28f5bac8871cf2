"""Mutual TLS through a lane hop: three ``serve --config`` nodes from ``cluster
init --tls``, edited to 2 lanes and keys mode (where an operator may sign the
sync routes with the cluster secret). Those routes are served by a node's
home lane; a member-signed call that the kernel hands to another lane is
handed over a Unix socket, where no certificate is seen, so the receiving
lane passes on the member its handshake verified. It was refused 401 "without
a client certificate" before; a client cannot claim a certificate by header.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.lanes.hop import CERT_HEADER
from tests.cluster.harness import LANE_PORT_OFFSET
from tests.cluster.tls_harness import IDS, TlsTrio, running, signed_request

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PATH = "/api/v1/sync/push"


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[TlsTrio]:
    t = TlsTrio(tmp_path, lanes=2)
    for nid in IDS:  # the operator's edit of what cluster init wrote
        conf = t.conf / f"{nid}.toml"
        text = conf.read_text()
        assert "lanes = 1\n" in text and 'mode = "anonymous"\n' in text
        conf.write_text(text.replace("lanes = 1\n", "lanes = 2\n")
                        .replace('mode = "anonymous"\n', 'mode = "keys"\n'))
    with running(t):
        yield t


def _signed_push(trio: TlsTrio, lane: int, claimed: str, cert_of: str | None,
                 extra: dict[str, str] | None = None) -> tuple[int, str]:
    """A sync push signed as ``claimed`` to node1's lane ``lane`` (its own
    port), over a connection presenting ``cert_of``'s member certificate."""
    secret = tomllib.loads((trio.conf / "node1.toml").read_text())["cluster"]["secret"]
    body = json.dumps({"sender_agent_id": "tool", "memories": [], "deletions": []}).encode()
    url = f"https://127.0.0.1:{trio.port('node1') + LANE_PORT_OFFSET * (lane + 1)}"
    return signed_request(trio, url, PATH, body, "application/json", claimed=claimed,
                          target="node1", cert_of=cert_of, secret=secret, headers=extra)


def test_a_member_signed_sync_handed_to_the_home_lane_keeps_its_certificate_check(
        trio: TlsTrio) -> None:
    for lane in (0, 1):  # served where it arrived, and handed from lane 1 to lane 0
        code, text = _signed_push(trio, lane, "node2", "node2")
        assert code == 200, (lane, text)
        code, text = _signed_push(trio, lane, "node2", "node3")
        assert code == 403 and "names member 'node3', not 'node2'" in text, (lane, text)
        code, text = _signed_push(trio, lane, "node2", None)
        assert code == 401 and "client certificate" in text, (lane, text)
    # The header a lane passes on is its own: a client's is dropped.
    code, text = _signed_push(trio, 1, "node2", "node3", {CERT_HEADER: "node2"})
    assert code == 403 and "names member 'node3'" in text, text
    code, text = _signed_push(trio, 1, "node2", None, {CERT_HEADER: "node2"})
    assert code == 401, text
