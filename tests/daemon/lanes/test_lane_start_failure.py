"""A lane whose start fails after its node was built exits with an error.

The lanes' shared sessions file is opened after the node (and its writer
thread) started; an open that failed there left a process that neither
served nor exited, so its supervisor, waiting for it to serve or exit,
kept a node with one lane short (CI, 2026-12-05). A sessions file that is
not a database stands for any failure at that point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from daemon.api.webui import SESSIONS_FILE
from daemon.lanes.supervisor import DIR_ENV, FLAGS_ENV, INDEX_ENV, PARENT_ENV
from tests.cluster.harness import ROOT, free_port


def test_a_lane_that_cannot_open_the_sessions_file_exits_instead_of_hanging(
        tmp_path: Path) -> None:
    lane_dir = tmp_path / "lanes"
    lane_dir.mkdir(mode=0o700)
    (lane_dir / SESSIONS_FILE).write_bytes(b"not a database " * 512)
    flags = {"port": free_port(), "db": str(tmp_path / "node.db"), "lanes": 2}
    env = {**os.environ, "PYTHONPATH": str(ROOT), FLAGS_ENV: json.dumps(flags),
           INDEX_ENV: "0", DIR_ENV: str(lane_dir), PARENT_ENV: str(os.getpid())}
    env.pop("NOTIFY_SOCKET", None)
    done = subprocess.run([sys.executable, "-m", "cli.lane_child"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "file is not a database" in done.stderr, done.stderr[-2000:]
    assert "shutting down" in done.stderr  # the node it had built was stopped
