"""Every benchmark command prints its help: a newcomer's first call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = sorted(p.stem for p in (ROOT / "bench").glob("*.py")
                  if "argparse" in p.read_text(encoding="utf-8"))


def test_the_benchmark_commands_are_found() -> None:
    assert "__main__" in COMMANDS and "ab" in COMMANDS and len(COMMANDS) >= 10


@pytest.mark.parametrize("name", COMMANDS)
def test_help_prints(name: str) -> None:
    module = "bench" if name == "__main__" else f"bench.{name}"
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
