"""A rolling upgrade under load, with real processes of two builds.

Three nodes of this build; then each in turn is stopped and started again as
the "newer" build (``tests/cluster/newer_build.py``: the same code plus an op
kind, ``widget.put``). While versions are mixed, newer nodes write links;
older nodes must keep every batch going (a link op among notifies must not
sink the notifies), keep the link ops without applying them, count them,
and forward them. After the last node is upgraded, every acknowledged write
of either kind is on every node, and every node has applied every link (the
ones kept aside while it was older included): 0 writes lost.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

from federation.messages import PROTOCOL_VERSION
from tests.cluster.harness import Cluster, http
from tests.cluster.load import Load

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]
NEWER = Path(__file__).with_name("newer_build.py")


class MixedCluster(Cluster):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.newer: set[str] = set()

    def _cmd(self, nid: str) -> list[str]:
        cmd = super()._cmd(nid)
        if nid in self.newer:
            assert cmd[1:4] == ["-m", "cli", "serve"], cmd
            cmd = [sys.executable, str(NEWER), *cmd[4:]]
        return cmd

    def upgrade(self, nid: str) -> None:
        p = self.procs[nid]
        assert p.popen is not None
        p.popen.send_signal(signal.SIGTERM)
        assert p.popen.wait(timeout=30) == 0
        self.newer.add(nid)
        self.start(nid)


class LinkLoad:
    """Writes links through whichever nodes are newer at the moment."""

    def __init__(self, c: MixedCluster) -> None:
        self.c = c
        self.acked: list[str] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            targets = sorted(self.c.newer)
            if not targets:
                time.sleep(0.05)
                continue
            n += 1
            nid = targets[n % len(targets)]
            try:
                code, _ = self.c.call(nid, "POST", "/api/v1/test/links",
                                      {"id": f"l{n}", "src": f"a{n}", "dst": f"b{n}"}, timeout=5)
            except OSError:
                code = 0
            if code == 201:
                self.acked.append(f"l{n}")
            else:
                self.failed += 1
                time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)


def rows(db: Path, sql: str) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute(sql)}
    except sqlite3.OperationalError:  # no test_widgets table yet
        return set()
    finally:
        conn.close()


def metric(c: Cluster, nid: str, name: str) -> float:
    code, text = c.call(nid, "GET", "/api/v1/metrics")
    assert code == 200
    return sum(float(line.rsplit(" ", 1)[1]) for line in str(text).splitlines()
               if line.startswith(f"ai_memory_{name}"))


def test_upgrade_node_by_node_under_load_loses_no_write(tmp_path: Path) -> None:
    c = MixedCluster(tmp_path)
    try:
        c.start()
        notes = Load(c, c.ids, per_thread=1)
        links = LinkLoad(c)
        time.sleep(1.0)
        c.upgrade("node1")
        time.sleep(2.0)
        # Mixed versions: the older nodes keep link ops (kept, counted), and notifies
        # coordinated by the newer node still reach their quorum through them.
        assert links.acked, "no link was acknowledged while versions were mixed"
        for old in ("node2", "node3"):
            assert metric(c, old, "ops_unknown_kind_total") > 0
        assert rows(c.procs["node2"].db, "SELECT id FROM test_widgets") == set()  # not applied
        assert rows(c.procs["node2"].db, "SELECT key FROM ops_deferred")
        mixed_notes = len([t for _, nid, t in notes.acked if nid == "node1"])
        c.upgrade("node2")
        time.sleep(2.0)
        c.upgrade("node3")
        time.sleep(2.0)
        notes.stop()
        links.stop()
        assert len([t for _, nid, t in notes.acked if nid == "node1"]) > mixed_notes

        c.wait_converged(timeout=60)
        sent_notes = {t for _, _, t in notes.acked}
        sent_links = set(links.acked)
        lost = 0
        for nid in c.ids:
            db = c.procs[nid].db
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                missing_notes = sent_notes - rows(db, "SELECT title FROM notes")
                missing_links = sent_links - rows(db, "SELECT id FROM test_widgets")
                if not missing_notes and not missing_links:
                    break
                time.sleep(0.2)
            lost += len(missing_notes) + len(missing_links)
            assert not missing_notes, (nid, sorted(missing_notes)[:5])
            assert not missing_links, (nid, sorted(missing_links)[:5])
            assert rows(db, "SELECT key FROM ops_deferred") == set()  # all applied now
            status = c.status(nid)
            assert status["protocol"] == PROTOCOL_VERSION
            assert set(status["peer_protocols"].values()) == {PROTOCOL_VERSION}
        code, _ = http("GET", c.url("node1") + "/api/v1/health")
        assert code == 200
        print(f"rolling upgrade: {len(sent_notes)} notifies + {len(sent_links)} links "
              f"acknowledged, {notes.failed + links.failed} refused during restarts, "
              f"{lost} lost")
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()
