"""Backup, restore and sync of a node with lanes (``serve --lanes 2``, keys
mode, real processes): ``ai-memory backup`` copies every lane (one file per
lane and a description naming them), a backup of the shared client port
alone is refused with what to do, ``restore`` refuses another lane count,
and a signed sync call verifies on one process whichever lane accepts it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import ROOT
from tests.cluster.lanes_harness import ROOT_KEY, LaneCluster, started

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LaneCluster]:
    with started(tmp_path, n=1) as c:
        yield c


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def layout(db: Path) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return str(conn.execute("SELECT value FROM store_meta WHERE name = 'lane_layout'")
                   .fetchone()[0])
    finally:
        conn.close()


def test_backup_every_lane_and_restore_the_same_count(node: LaneCluster, tmp_path: Path) -> None:
    c = node
    code, body = c.call("node1", "POST", "/api/v1/admin/backup")  # the shared port: which lane?
    assert code == 409 and "lanes" in json.dumps(body), body
    out = tmp_path / "b" / "copy.db"
    out.parent.mkdir()
    done = cli("--url", c.url("node1"), "--key", ROOT_KEY, "backup", "--out", str(out))
    assert done.returncode == 0, done.stderr
    meta = json.loads(Path(f"{out}.json").read_text())
    lane1 = out.with_name("copy.lane1.db")
    assert meta["lanes"] == 2 and meta["lane_files"] == [str(out), str(lane1)], meta
    assert layout(out) == "0/2/2" and layout(lane1) == "1/2/2"  # partition 2
    db = tmp_path / "restored" / "node.db"
    refused = cli("restore", str(out), "--db", str(db))  # lanes 1 by default
    assert refused.returncode != 0 and "2 lane(s)" in refused.stderr, refused.stderr
    assert not db.exists()
    done = cli("restore", str(out), "--db", str(db), "--lanes", "2")
    assert done.returncode == 0, done.stderr
    assert layout(db) == "0/2/2" and layout(db.with_name("node.lane1.db")) == "1/2/2"


def _signed_since(c: LaneCluster, boot: str) -> tuple[int, Any, str]:
    from daemon.peer.auth import BOOT_HEADER, sign

    path = "/api/v1/sync/since"
    assert c.secret is not None
    headers = sign(c.secret, "ai-memory-operator", "node1", "GET", path, b"", time.time(), boot)
    req = urllib.request.Request(c.url("node1") + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), boot
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get(BOOT_HEADER) or ""


def test_a_signed_sync_verifies_whichever_lane_accepts_it(node: LaneCluster) -> None:
    c = node
    code, _, boot = _signed_since(c, "")
    assert code == 401 and boot
    for _ in range(10):  # new connections: spread over the lanes by the kernel
        code, body, _ = _signed_since(c, boot)
        assert code == 200, body
