"""A new cluster starts the way users start it, with no flag (daemon/replication/joining.py).

Real ``ai-memory serve`` processes on loopback, started as upstream's users
start them (``--quorum-peers URL,... --quorum-writes 2`` and ``AI_MEMORY_DB``)
or as systemd does from ``cluster init`` configs (``serve --config``), in
random orders and with gaps; a member wiped among live ones is seeded, never
bootstrapped; members wiped while the one holding data is down wait for it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cluster.harness import ROOT, free_port

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

START_TIMEOUT_SECS = 30.0


def free_base(count: int = 3) -> int:
    """A port with ``count - 1`` free ports after it (cluster init numbers them
    so), below the kernel's ephemeral range: a health poll of a member not
    listening yet on a port in that range can be given that very port as its
    own and connect to itself (it read its own request back as the answer,
    once in a full run)."""
    return free_port(tuple(range(count)))


def http(method: str, url: str, body: dict | None = None, headers: dict | None = None,
         timeout: float = 5.0) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@dataclass
class Member:
    name: str
    url: str
    argv: list[str]
    env: dict[str, str]
    db: Path
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    logs: list[str] = field(default_factory=list)

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            self.popen = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=fh,
                                          stderr=subprocess.STDOUT)

    def kill9(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def wipe(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.db}{suffix}").unlink(missing_ok=True)

    def health(self) -> tuple[int, dict]:
        try:
            return http("GET", self.url + "/api/v1/health", timeout=2)
        except OSError:
            return 0, {}

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI_MEMORY_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def upstream_members(tmp: Path) -> list[Member]:
    """Three members as upstream's users start them: plain URLs, AI_MEMORY_DB."""
    base = free_base()
    urls = [f"http://127.0.0.1:{base + i}" for i in range(3)]
    out = []
    for i, url in enumerate(urls):
        db = tmp / f"m{i + 1}" / "ai-memory.db"  # the directory does not exist yet
        argv = [sys.executable, "-m", "cli", "serve", "--port", str(base + i),
                "--quorum-peers", ",".join(urls), "--quorum-writes", "2"]
        out.append(Member(f"m{i + 1}", url, argv, _env(AI_MEMORY_DB=str(db)), db,
                          tmp / f"m{i + 1}.log"))
    return out


def init_members(tmp: Path) -> list[Member]:
    """Three members from ``cluster init`` configs, started as systemd does."""
    base = free_base()
    conf = tmp / "conf"
    subprocess.run([sys.executable, "-m", "cli", "cluster", "init", "--out", str(conf),
                    "--base-port", str(base), "--data", str(tmp / "data")],
                   cwd=ROOT, env=_env(), check=True, capture_output=True)
    out = []
    for i in range(3):
        path = conf / f"node{i + 1}.toml"
        db = Path(tomllib.loads(path.read_text())["store"]["db"])
        assert not db.parent.exists()  # serve creates it
        argv = [sys.executable, "-m", "cli", "serve", "--config", str(path)]
        out.append(Member(f"node{i + 1}", f"http://127.0.0.1:{base + i}", argv, _env(), db,
                          tmp / f"node{i + 1}.log"))
    return out


@pytest.fixture
def reaper() -> Iterator[list[Member]]:
    members: list[Member] = []
    yield members
    for m in members:
        if m.popen is not None and m.popen.poll() is None:
            m.popen.send_signal(signal.SIGCONT)
            m.popen.terminate()
            try:
                m.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                m.popen.kill()


def wait_serving(members: list[Member], timeout: float = START_TIMEOUT_SECS,
                 recovered: bool = True) -> float:
    """Until every member answers 200 (and, with ``recovered``, is not
    recovering); returns the seconds it took."""
    start = time.monotonic()
    deadline = start + timeout
    while time.monotonic() < deadline:
        states = []
        for m in members:
            assert m.popen is not None
            if m.popen.poll() is not None:
                raise AssertionError(f"{m.name} exited {m.popen.returncode}:\n{m.text()[-3000:]}")
            status, body = m.health()
            states.append(status == 200 and (not recovered or body.get("state") == "serving"))
        if all(states):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError("not serving:\n" + "\n".join(
        f"--- {m.name} {m.health()}\n{m.text()[-1500:]}" for m in members))


def notify_and_read(members: list[Member], title: str) -> None:
    status, body = http("POST", members[0].url + "/api/v1/notify",
                        {"target_agent_id": "bob", "title": title, "payload": "x"},
                        {"X-Agent-Id": "alice"})
    assert status == 201, body
    for m in members:
        status, inbox = http("GET", m.url + "/api/v1/inbox?agent_id=bob&unread_only=false",
                             headers={"X-Agent-Id": "bob"})
        assert status == 200 and title in [n["title"] for n in inbox["messages"]], (m.name, inbox)


def bootstrapped(m: Member) -> bool:
    return "bootstrapping a new cluster" in m.text()


def seeded(m: Member) -> bool:
    return "seeded from" in m.text()


def test_three_members_with_upstream_flags_started_at_once(tmp_path: Path,
                                                            reaper: list[Member]) -> None:
    members = upstream_members(tmp_path)
    reaper.extend(members)
    for m in members:
        m.start()
    wait_serving(members)
    # All new together: nobody was seeded, nobody recovers, one cluster id.
    assert all(bootstrapped(m) and not seeded(m) for m in members), [m.text() for m in members]
    ids = {m.health()[1]["cluster_id"] for m in members}
    assert len(ids) == 1 and ids.pop().startswith("m-")
    notify_and_read(members, "first start")


def test_cluster_init_configs_in_random_order_with_gaps(tmp_path: Path,
                                                        reaper: list[Member]) -> None:
    members = init_members(tmp_path)
    reaper.extend(members)
    rng = random.Random()
    order = rng.sample(members, 3)
    gaps = sorted(rng.uniform(0, 6) for _ in range(2))
    order[0].start()
    time.sleep(gaps[0])
    # The first is waiting for the others, and says so.
    status, body = order[0].health()
    assert status in (0, 503)  # 0: still starting its process (a short gap)
    if status == 503:
        assert body["state"] == "waiting_for_peers" and body["waiting_for"], body
    # Once it has probed (its detail is a decision's), it has logged what it waits for.
    probed = status == 503 and body["detail"] != "asking the other members what they hold"
    order[1].start()
    time.sleep(gaps[1] - gaps[0])
    order[2].start()
    wait_serving(members)
    cid = tomllib.loads((tmp_path / "conf" / "node1.toml").read_text())["cluster"]["cluster_id"]
    assert {m.health()[1]["cluster_id"] for m in members} == {cid}
    notify_and_read(members, "from configs")
    if probed:
        assert "waiting before serving" in order[0].text()


def test_a_wiped_member_among_live_ones_is_seeded(tmp_path: Path,
                                                  reaper: list[Member]) -> None:
    members = upstream_members(tmp_path)
    reaper.extend(members)
    for m in members:
        m.start()
    wait_serving(members)
    notify_and_read(members, "before the wipe")
    victim = members[1]
    victim.kill9()
    victim.wipe()
    victim.log.write_text("")
    victim.start()
    wait_serving(members, recovered=False)
    assert seeded(victim) and not bootstrapped(victim), victim.text()
    wait_serving(members)  # it recovers from every member, then serves
    status, inbox = http("GET", victim.url + "/api/v1/inbox?agent_id=bob&unread_only=false",
                         headers={"X-Agent-Id": "bob"})
    assert status == 200 and "before the wipe" in [n["title"] for n in inbox["messages"]]
    notify_and_read(members, "after the wipe")


def test_two_wiped_members_wait_for_the_one_with_data(tmp_path: Path,
                                                      reaper: list[Member]) -> None:
    members = upstream_members(tmp_path)
    reaper.extend(members)
    for m in members:
        m.start()
    wait_serving(members)
    notify_and_read(members, "kept by one")
    for m in members:
        m.kill9()
    for m in members[:2]:
        m.wipe()
        m.log.write_text("")
        m.start()
    time.sleep(4)
    for m in members[:2]:
        status, body = m.health()
        assert status == 503 and body["state"] == "waiting_for_peers", body
        assert members[2].url.split("//")[1] in body["waiting_for"], body
        assert m.popen is not None and m.popen.poll() is None  # waiting, not exited
        assert not m.db.exists()  # and not bootstrapped
        status, body = http("POST", m.url + "/api/v1/notify",
                            {"target_agent_id": "bob", "title": "t", "payload": "x"},
                            {"X-Agent-Id": "alice"})
        assert status == 503 and body["code"] == "starting"
    members[2].start()
    wait_serving(members)
    assert all(seeded(m) and not bootstrapped(m) for m in members[:2])
    for m in members:
        status, inbox = http("GET", m.url + "/api/v1/inbox?agent_id=bob&unread_only=false",
                             headers={"X-Agent-Id": "bob"})
        assert "kept by one" in [n["title"] for n in inbox["messages"]], (m.name, inbox)


def test_another_clusters_member_is_refused(tmp_path: Path, reaper: list[Member]) -> None:
    members = init_members(tmp_path)
    reaper.extend(members)
    for m in members:
        m.start()
    wait_serving(members)
    notify_and_read(members, "ours")
    # node3 loses its disk and comes back configured for another cluster.
    victim = members[2]
    victim.kill9()
    victim.wipe()
    conf = Path(victim.argv[-1])
    text = conf.read_text()
    cid = tomllib.loads(text)["cluster"]["cluster_id"]
    conf.write_text(text.replace(cid, "c-someone-else"))
    victim.log.write_text("")
    victim.start()
    assert victim.popen is not None
    assert victim.popen.wait(timeout=30) != 0
    out = victim.text()
    assert "serves cluster " + cid in out and "c-someone-else" in out, out
    assert "Traceback" not in out
    # The database of one cluster is refused under another's configuration.
    conf.write_text(text)
    victim.log.write_text("")
    victim.start()
    wait_serving(members)
    victim.popen.terminate()
    victim.popen.wait(timeout=10)
    conf.write_text(text.replace(cid, "c-someone-else"))
    victim.log.write_text("")
    victim.start()
    assert victim.popen.wait(timeout=30) != 0
    assert f"belongs to cluster {cid}" in victim.text()


def test_a_waiting_member_stops_on_sigterm(tmp_path: Path, reaper: list[Member]) -> None:
    members = upstream_members(tmp_path)
    reaper.extend(members)
    m = members[0]
    m.start()
    deadline = time.monotonic() + 20
    while m.health()[0] != 503:
        assert time.monotonic() < deadline, m.text()
        time.sleep(0.05)
    assert m.popen is not None
    m.popen.terminate()
    assert m.popen.wait(timeout=10) == 0
    assert not m.db.exists()
