"""A supervisor killed with SIGKILL leaves its private directory; the next one removes it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from daemon.lanes.supervisor import DIR_PREFIX, sweep_stale_dirs


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_the_directories_of_dead_supervisors_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f"{DIR_PREFIX}{_dead_pid()}-abc"
    live = tmp_path / f"{DIR_PREFIX}{os.getpid()}-def"
    unnamed = tmp_path / f"{DIR_PREFIX}xyz"  # not named after a pid: not ours to judge
    other = tmp_path / "something-else-1"
    for d in (dead, live, unnamed, other):
        d.mkdir()
        (d / "notify0.sock").write_text("")
    assert sweep_stale_dirs(str(tmp_path)) == [str(dead)]
    assert not dead.exists() and live.exists() and unnamed.exists() and other.exists()
    assert sweep_stale_dirs(str(tmp_path / "missing")) == []
