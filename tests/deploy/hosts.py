"""Three ai-memory nodes deployed on the hosts of a :class:`tests.deploy.netns.Network`.

How it works: :func:`deploy` runs ``ai-memory cluster init --host A --host B
--host C`` as an operator does, then each :class:`Node` is ``ai-memory serve
--config nodeN.toml`` under ``ip netns exec HOST`` (what systemd's unit runs,
with no bootstrap flag), given the root key in ``AI_MEMORY_ROOT_KEY`` as
deploy/README.md and docs/operations.md describe. The test process itself
cannot reach the hosts (their network lives in the namespaces), so it talks
to them through :class:`Driver`, a JSON-lines agent in the client namespace
(``driver.py``), and runs the CLI there with :meth:`Deployment.cli`.

TLS is the one switch :data:`TLS`: it sets the URL scheme, the CA file the
CLI (``--ca-cert`` / ``AI_MEMORY_CA_CERT``) and the SDK (httpx ``verify=``)
are given. Processes are killed by the pids this module started (and the
network's cleanup kills whatever is left in its namespaces).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.deploy.netns import CLIENT, Network

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
_SCRIPT = shutil.which("ai-memory", path=str(Path(PYTHON).parent))
AI_MEMORY = [_SCRIPT] if _SCRIPT else [PYTHON, "-m", "cli"]  # as systemd's unit runs it
BASE_PORT = 9077

# `cluster init` turns TLS on for non-loopback hosts: it mints the CA
# (OUT/ca.crt) and a certificate per node and writes [tls] sections; nodes
# serve https and peer over mutual TLS, and the clients get the CA (CLI
# AI_MEMORY_CA_CERT, SDK/httpx verify=). False only to debug the test itself
# (the nodes then need --insecure-plaintext-peers, which no config carries).
TLS = True


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI_MEMORY_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


@dataclass
class Node:
    """One ``ai-memory serve --config`` on one host; started, killed, wiped."""

    name: str  # node id, node1..node3
    host: str  # the host (namespace) it runs on
    url: str
    config: Path
    db: Path
    log: Path
    argv: list[str]
    env: dict[str, str]
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            fh.write(f"\n==== start at {time.time():.3f}\n".encode())
            fh.flush()
            self.popen = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=fh,
                                          stderr=subprocess.STDOUT)

    def kill9(self) -> None:
        if self.popen and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=10)

    def reload(self) -> None:
        """``systemctl reload``: SIGHUP, which rereads the certificates."""
        assert self.popen and self.popen.poll() is None
        self.popen.send_signal(signal.SIGHUP)

    def wipe(self) -> None:
        """Lose the disk: the database directory is gone (serve makes it again)."""
        shutil.rmtree(self.db.parent, ignore_errors=True)

    def stop(self) -> None:
        if self.popen and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Driver:
    """The client namespace's agent (driver.py), one JSON request a line."""

    def __init__(self, net: Network, ca_cert: Path | None, log: Path) -> None:
        argv = [PYTHON, str(ROOT / "tests" / "deploy" / "driver.py")]
        if ca_cert:
            argv += ["--ca-cert", str(ca_cert)]
        self._err = open(log, "wb")  # closed in close()
        self.popen = subprocess.Popen(net.exec_argv(CLIENT, argv), cwd=ROOT, env=_env(),
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._err, text=True, bufsize=1)

    def __call__(self, op: str, **req: Any) -> Any:
        assert self.popen.stdin and self.popen.stdout
        self.popen.stdin.write(json.dumps({"op": op, **req}) + "\n")
        line = self.popen.stdout.readline()
        if not line:
            raise RuntimeError(f"driver exited ({self.popen.poll()})")
        out = json.loads(line)
        if not out["ok"]:
            raise RuntimeError(f"driver {op}: {out['error']}")
        return out["result"]

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=10)
        for pipe in (self.popen.stdin, self.popen.stdout):
            if pipe:
                pipe.close()
        self._err.close()


@dataclass
class Deployment:
    """Configs, nodes and the client of one cluster spread over a Network."""

    net: Network
    tmp: Path
    root_key: str
    nodes: dict[str, Node] = field(default_factory=dict)  # by host name
    ca_cert: Path | None = None
    driver: Driver | None = None

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes.values()]

    def url(self, host: str) -> str:
        return self.nodes[host].url

    def call(self, op: str, **req: Any) -> Any:
        assert self.driver is not None
        return self.driver(op, **req)

    def api(self, host: str, method: str, path: str, body: Any = None,
            params: dict | None = None, key: str | None = None,
            timeout: float = 5.0) -> tuple[int, Any]:
        out = self.call("http", method=method, url=self.url(host) + "/api/v1" + path,
                        key=key or self.root_key, body=body, params=params, timeout=timeout)
        return out["status"], out["body"]

    def cli(self, host: str, *args: str, key: str | None = None,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """``ai-memory --url HOST --key KEY ARGS`` run in the client namespace."""
        argv = [*AI_MEMORY, "--url", self.url(host), "--key", key or self.root_key, *args]
        env = _env(**({"AI_MEMORY_CA_CERT": str(self.ca_cert)} if self.ca_cert else {}))
        return subprocess.run(self.net.exec_argv(CLIENT, argv), cwd=self.tmp, env=env,
                              capture_output=True, text=True, timeout=timeout)

    def health(self, host: str) -> tuple[int, Any]:
        return self.api(host, "GET", "/health", timeout=2)

    def wait_serving(self, hosts: list[str] | None = None, timeout: float = 40) -> float:
        """Wait until every host in ``hosts`` answers /health with 200 and state
        ``serving`` (a seeded member first recovers, refusing writes); seconds taken."""
        t0 = time.monotonic()
        waiting = list(hosts or self.nodes)
        last: dict[str, tuple[int, Any]] = {}
        while waiting:
            for h in list(waiting):
                node = self.nodes[h]
                if node.popen and node.popen.poll() is not None:
                    raise RuntimeError(f"{node.name} on {h} exited "
                                       f"({node.popen.returncode}):\n{node.text()[-3000:]}")
                code, body = last[h] = self.health(h)
                if code == 200 and isinstance(body, dict) and body.get("state") == "serving":
                    waiting.remove(h)
            if waiting and time.monotonic() - t0 > timeout:
                answers = {h: last.get(h) for h in waiting}
                raise TimeoutError(f"not serving after {timeout}s: {waiting}; last health "
                                   f"answers {answers}\n" + self.logs())
            if waiting:
                time.sleep(0.1)
        return time.monotonic() - t0

    def logs(self, tail: int = 4000) -> str:
        return "\n".join(f"---- {n.name} on {h} ----\n{n.text()[-tail:]}"
                         for h, n in self.nodes.items())

    def close(self) -> None:
        if self.driver:
            self.driver.close()
        for n in self.nodes.values():
            n.kill9()


def deploy(net: Network, tmp: Path) -> Deployment:
    """``cluster init`` for the network's hosts, a root key, the client's driver;
    no node started yet."""
    hosts = list(net.hosts)
    key = subprocess.run([*AI_MEMORY, "key", "generate"], cwd=ROOT, env=_env(),
                         capture_output=True, text=True, check=True).stdout.strip()
    conf, data = tmp / "conf", tmp / "data"
    init = [*AI_MEMORY, "cluster", "init", "--out", str(conf), "--data", str(data),
            "--base-port", str(BASE_PORT)]
    for h in hosts:
        init += ["--host", net.addresses[h]]
    subprocess.run(init, cwd=ROOT, env=_env(), check=True, capture_output=True, text=True)
    dep = Deployment(net, tmp, key)
    if TLS:
        dep.ca_cert = conf / "ca.crt"
    scheme = "https" if TLS else "http"
    for i, h in enumerate(hosts):
        config = conf / f"node{i + 1}.toml"
        settings = tomllib.loads(config.read_text())
        assert settings["server"]["host"] == net.addresses[h], settings["server"]
        url = f"{scheme}://{net.addresses[h]}:{settings['server']['port']}"
        argv = net.exec_argv(h, [*AI_MEMORY, "serve", "--config", str(config)])
        dep.nodes[h] = Node(f"node{i + 1}", h, url, config, Path(settings["store"]["db"]),
                            tmp / f"node{i + 1}.log", argv, _env(AI_MEMORY_ROOT_KEY=key))
    dep.driver = Driver(net, dep.ca_cert, tmp / "driver.log")
    return dep
