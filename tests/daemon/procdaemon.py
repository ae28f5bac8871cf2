"""One real ``ai-memory serve`` process on loopback, for tests that must see
what the production server does (its handler settings, its log)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.harness import ROOT, free_port


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    port: int
    data: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def rss_kib(self, field: str = "VmHWM") -> int:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)


@contextmanager
def daemon_process(data: Path, *args: str, node_id: str = "node1",
                   port: int | None = None) -> Iterator[Proc]:
    data.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = data / f"{node_id}.log"
    cmd = [sys.executable, "-m", "cli", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--db", str(data / f"{node_id}.db"), "--node-id", node_id, *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "ab") as out:
        popen = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    proc = Proc(popen, port, data, log)
    try:
        deadline = time.monotonic() + 20
        while True:
            if popen.poll() is not None:
                raise RuntimeError(f"daemon exited: {proc.log_text()[-3000:]}")
            try:
                with urllib.request.urlopen(proc.url + "/api/v1/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(proc.log_text()[-3000:]) from None
                time.sleep(0.05)
        yield proc
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(timeout=5)
