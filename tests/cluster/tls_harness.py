"""Three real ``ai-memory serve --config`` nodes over HTTPS with mutual TLS.

The configs, the cluster CA and the member certificates come from
``ai-memory cluster init --tls`` (run as a process, as an operator would);
the nodes listen on 127.0.0.1. Tests talk to them with the CA in an SSL
context, send signals, and run the CLI against them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cryptography import x509

from daemon.peer.auth import BOOT_HEADER, sign
from tests.cluster.harness import ROOT, free_port, lane_offsets

IDS = ("node1", "node2", "node3")


def cli(*args: str, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``ai-memory ARGS`` as a process (no CA from the test's environment)."""
    base = {k: v for k, v in os.environ.items() if k != "AI_MEMORY_CA_CERT"}
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout,
                          env={**base, "PYTHONPATH": str(ROOT), **(env or {})})


def free_base(n: int = 3, lanes: int = 1) -> int:
    """A port with the next ``n - 1`` free too (cluster init numbers them in a
    row), and with ``lanes``, each one's lane ports."""
    return free_port(tuple(i + o for i in range(n) for o in lane_offsets(lanes)))


def served_serial(port: int, ca: Path) -> int:
    """The serial number of the certificate a node presents right now."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


class TlsTrio:
    def __init__(self, tmp: Path, lanes: int = 1) -> None:
        self.conf = tmp / "conf"
        self.data = tmp / "data"
        self.lanes = lanes  # ports are kept free for this many lanes per node
        self.base = free_base(lanes=lanes)
        done = cli("cluster", "init", "--nodes", "3", "--base-port", str(self.base),
                   "--host", "127.0.0.1", "--tls", "--out", str(self.conf),
                   "--data", str(self.data))
        assert done.returncode == 0, done.stderr
        for nid in IDS:  # until the first-start change creates it (issue 23, part 1)
            (self.data / nid).mkdir(parents=True, exist_ok=True)
        self.ca = self.conf / "ca.crt"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started: set[str] = set()

    def port(self, nid: str) -> int:
        return self.base + IDS.index(nid)

    def url(self, nid: str) -> str:
        return f"https://127.0.0.1:{self.port(nid)}"

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    # -- processes ------------------------------------------------------------
    def start(self, nid: str, *extra: str) -> None:
        cmd = [sys.executable, "-m", "cli", "serve", "--config", str(self.conf / f"{nid}.toml"),
               "--log-level", "debug", *extra]
        log = open(self.data / f"{nid}.log", "ab")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.procs[nid] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                           stderr=subprocess.STDOUT)
        log.close()
        self.started.add(nid)

    def start_all(self) -> None:
        for nid in IDS:
            self.start(nid)
        for nid in IDS:
            self.wait_healthy(nid)

    def wait_healthy(self, nid: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            proc = self.procs[nid]
            if proc.poll() is not None:
                raise RuntimeError(f"{nid} exited {proc.returncode}: {self.log(nid)[-3000:]}")
            try:
                code, _ = self.call(nid, "GET", "/api/v1/health", timeout=1)
                if code == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{nid} not healthy: {self.log(nid)[-3000:]}")
            time.sleep(0.1)

    def signal(self, nid: str, sig: int) -> None:
        self.procs[nid].send_signal(sig)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def log(self, nid: str) -> str:
        path = self.data / f"{nid}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {nid}\n{self.log(nid)[-4000:]}" for nid in IDS)

    # -- HTTP -------------------------------------------------------------------
    def call(self, nid: str, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None, timeout: float = 10) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url(nid) + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.context()) as resp:
                raw, status = resp.read(), resp.status
        except urllib.error.HTTPError as exc:
            with exc:
                raw, status = exc.read(), exc.code
        return status, (json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode())

    def vv(self, nid: str) -> dict[str, int]:
        code, body = self.call(nid, "GET", "/api/v1/cluster/status", timeout=3)
        assert code == 200, body
        return dict(body["vv"])

    def wait_converged(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                last = {nid: self.vv(nid) for nid in IDS}
            except (OSError, AssertionError):
                time.sleep(0.1)
                continue
            if all(v == last["node1"] for v in last.values()):
                return
            time.sleep(0.1)
        raise TimeoutError(f"no convergence in {timeout}s: {last}")


@contextmanager
def running(trio: TlsTrio) -> Iterator[TlsTrio]:
    """Every node of ``trio`` started and healthy; their logs printed if the
    test fails; stopped after."""
    try:
        trio.start_all()
        yield trio
    except Exception:
        print(trio.logs())
        raise
    finally:
        trio.stop()


def signed_request(trio: TlsTrio, url: str, path: str, body: bytes, content_type: str, *,
                   claimed: str, target: str, cert_of: str | None, secret: str,
                   headers: dict[str, str] | None = None) -> tuple[int, str]:
    """A POST of ``body`` to ``url + path`` signed with ``secret`` as member
    ``claimed`` for ``target``, over a connection presenting ``cert_of``'s
    member certificate (None: none); the status and the body's text. A
    first 401 that names the target's boot id is signed again with it."""
    ctx = trio.context()
    if cert_of is not None:
        ctx.load_cert_chain(trio.conf / f"{cert_of}.crt", trio.conf / f"{cert_of}.key")
    boot = ""
    for _ in range(2):
        sent = {"Content-Type": content_type, **(headers or {}),
                **sign(secret, claimed, target, "POST", path, body, time.time(), boot)}
        req = urllib.request.Request(url + path, data=body, method="POST", headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            with exc:
                text = exc.read().decode(errors="replace")
            if exc.code == 401 and exc.headers.get(BOOT_HEADER) and not boot:
                boot = exc.headers[BOOT_HEADER]
                continue
            return exc.code, text
    raise AssertionError("boot id not learned")
