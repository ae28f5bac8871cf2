"""``python -m bench --tls``: what TLS costs the servers, per notify and per claim.

Two three-node clusters from ``ai-memory cluster init`` configs on
127.0.0.1, one ``--no-tls`` and one ``--tls`` (HTTPS for the client, mutual
TLS and the wss peer channel between members), both up for the whole run.
Rounds alternate between them (plain, TLS, plain, TLS, ...) so that drift
on a shared machine hits both alike. In each round a client with a few
keep-alive connections spread over the three nodes sends ``--tls-notifies``
notifies, then claims ``--tls-claims`` project messages (sent beforehand,
outside the measured window, at most ``limits.mailbox_pending_max`` at a
time). The figure is the CPU time of the three server processes (user +
system, from /proc, :mod:`bench.cpu`) over each measured window divided by
the operations in it; the client's own CPU is not counted. Besides the
medians, each round's TLS figure is divided by the plain one measured next
to it (paired rounds), which cancels most of the machine's drift. Handshakes are
inside the figures only as often as the pooled connections make them: the
peer channel is one long-lived connection per pair of members.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.cpu import CLK_TCK, cpu_ticks
from bench.procs import free_ports
from common import limits

REPO = Path(__file__).resolve().parents[1]
WORKERS = 8


@dataclass
class Trio:
    name: str
    tls: bool
    base: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    _ssl: ssl.SSLContext | bool | None = None

    def start(self) -> None:
        port = _run_of_ports(3)
        conf, data = self.base / "conf", self.base / "data"
        subprocess.run([sys.executable, "-m", "cli", "cluster", "init", "--nodes", "3",
                        "--base-port", str(port), "--host", "127.0.0.1", "--out", str(conf),
                        "--data", str(data), "--tls" if self.tls else "--no-tls"],
                       cwd=REPO, check=True, capture_output=True)
        scheme = "https" if self.tls else "http"
        for i in range(3):
            (data / f"node{i + 1}").mkdir(parents=True, exist_ok=True)
            log = open(self.base / f"node{i + 1}.log", "ab")
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "cli", "serve", "--config", str(conf / f"node{i + 1}.toml"),
                 "--initial-cluster-state", "new"],  # a new cluster, every member new
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(REPO)}))
            log.close()
            self.urls.append(f"{scheme}://127.0.0.1:{port + i}")

    def ssl(self) -> ssl.SSLContext | bool:
        # One context for the run: aiohttp pools connections per context object.
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.base / "conf" / "ca.crt")) \
                if self.tls else True
        return self._ssl

    def ticks(self) -> int:
        return sum(cpu_ticks(p.pid) for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def _run_of_ports(n: int) -> int:
    for _ in range(50):
        ports = free_ports(1)
        if all(_free(ports[0] + i) for i in range(n)):
            return ports[0]
    raise RuntimeError("no run of free ports")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def _wait_healthy(session: aiohttp.ClientSession, trio: Trio) -> None:
    deadline = time.monotonic() + 60
    for url in trio.urls:
        while True:
            try:
                async with session.get(url + "/api/v1/health", ssl=trio.ssl()) as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{trio.name}: {url} not healthy")
            await asyncio.sleep(0.1)


async def _fan(n: int, op: Any) -> None:
    """``op(i)`` for i in range(n), ``WORKERS`` at a time."""
    it = iter(range(n))

    async def worker() -> None:
        for i in it:
            await op(i)

    await asyncio.gather(*(worker() for _ in range(WORKERS)))


async def _post(session: aiohttp.ClientSession, trio: Trio, i: int, path: str, body: Any,
                agent: str) -> Any:
    url = trio.urls[i % 3] + path
    async with session.post(url, json=body, headers={"X-Agent-Id": agent}, ssl=trio.ssl()) as r:
        answer = await r.json()
        if r.status >= 300:
            raise RuntimeError(f"{trio.name} POST {path}: {r.status} {answer}")
        return answer


async def _notifies(session: aiohttp.ClientSession, trio: Trio, n: int) -> float:
    async def one(i: int) -> None:
        await _post(session, trio, i, "/api/v1/notify",
                    {"target_agent_id": f"bench-{i % 16}", "title": "tls bench",
                     "payload": "x" * 200}, "bench-sender")
    before = trio.ticks()
    await _fan(n, one)
    return (trio.ticks() - before) / CLK_TCK / n


async def _claims(session: aiohttp.ClientSession, trio: Trio, n: int, project: str) -> float:
    spent = 0
    left = n
    while left:
        batch = min(left, limits.mailbox_pending_max - 16)

        async def send(i: int) -> None:
            await _post(session, trio, i, "/api/v1/messages",
                        {"to_workspace": "bench", "to_project": project, "from_workspace": "bench",
                         "from_project": "bench-sender", "from_agent": "bench-mailer",
                         "subject": "tls bench", "body": "y" * 200}, "bench-mailer")

        async def pop(i: int) -> None:
            got = await _post(session, trio, i, "/api/v1/messages/pop",
                              {"workspace": "bench", "project": project,
                               "request_id": uuid.uuid4().hex}, "bench-popper")
            if got.get("message") is None:
                raise RuntimeError(f"{trio.name}: an empty pop")

        await _fan(batch, send)
        before = trio.ticks()
        await _fan(batch, pop)
        spent += trio.ticks() - before
        left -= batch
    return spent / CLK_TCK / n


async def _session_for(session: aiohttp.ClientSession, trio: Trio, project: str) -> None:
    for p in (project, "bench-sender"):
        await _post(session, trio, 0, "/api/v1/sessions",
                    {"workspace": "bench", "project": p, "harness": "bench",
                     "session_id": f"bench-{p}-{uuid.uuid4().hex[:8]}"}, "bench-mailer")


async def _measure(trios: list[Trio], rounds: int, notifies: int, claims: int) -> dict[str, Any]:
    out: dict[str, dict[str, list[float]]] = {t.name: {"notify": [], "claim": []} for t in trios}
    connector = aiohttp.TCPConnector(limit_per_host=WORKERS)
    async with aiohttp.ClientSession(connector=connector) as session:
        for t in trios:
            await _wait_healthy(session, t)
            await _session_for(session, t, "bench-inbox")
            await _notifies(session, t, 50)  # warm: connections, channels, caches
        for r in range(rounds):
            for t in trios if r % 2 == 0 else list(reversed(trios)):
                out[t.name]["notify"].append(await _notifies(session, t, notifies))
                out[t.name]["claim"].append(await _claims(session, t, claims, "bench-inbox"))
                print(f"round {r + 1} {t.name}: {out[t.name]['notify'][-1] * 1e3:.2f} ms CPU per "
                      f"notify, {out[t.name]['claim'][-1] * 1e3:.2f} ms per claim", flush=True)
    return out


def main(rounds: int, notifies: int, claims: int) -> int:
    with tempfile.TemporaryDirectory(prefix="aim-tls-bench-") as tmp:
        trios = [Trio("plain", False, Path(tmp) / "plain"), Trio("tls", True, Path(tmp) / "tls")]
        try:
            for t in trios:
                t.start()
            got = asyncio.run(_measure(trios, rounds, notifies, claims))
        finally:
            for t in trios:
                t.stop()
    print(f"\nserver CPU per operation, 3 nodes, median of {rounds} alternating rounds "
          f"({notifies} notifies, {claims} claims each):")
    print("| | plain | TLS | TLS / plain | paired rounds (min-median-max) |\n|---|---|---|---|---|")
    for kind in ("notify", "claim"):
        plain = statistics.median(got["plain"][kind])
        tls = statistics.median(got["tls"][kind])
        # each round's TLS figure against the plain one measured right next to it
        pairs = sorted(t / p for t, p in zip(got["tls"][kind], got["plain"][kind], strict=True)
                       if p > 0)
        ratio = f"{tls / plain:.2f}" if plain > 0 else "-"
        spread = (f"{pairs[0]:.2f}-{statistics.median(pairs):.2f}-{pairs[-1]:.2f}" if pairs
                  else "-")
        print(f"| {kind} | {plain * 1e3:.2f} ms | {tls * 1e3:.2f} ms | {ratio} | {spread} |")
    if any(0 in got[t.name][kind] for t in trios for kind in ("notify", "claim")):
        # /proc counts CPU in ticks of 1/CLK_TCK s: a window shorter than a few
        # ticks of server CPU may read 0 (30 notifies of 0.3 ms on 3 nodes).
        print(f"(a round measured no CPU tick at all: too few operations for ticks of "
              f"{1e3 / CLK_TCK:.0f} ms; raise --tls-notifies / --tls-claims)")
    return 0
