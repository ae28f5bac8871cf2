"""Three real members with two lanes each (``ai-memory serve --lanes 2``).

One cluster serves the whole module (starting nine lane processes costs
seconds on a small machine); each test leaves every member serving.

* notes and mail for keys of both lanes, sent and read through every member
  (their event streams too), each id minted on its key's lane, each pop
  claiming once;
* the lanes of a supervisor killed with SIGKILL exit too;
* a member started with another lane count is refused with an error that
  says so: by its database's recorded layout, or, wiped, by its peers'
  cluster ids before it is seeded; a member whose disk is wiped has each
  lane seeded from a peer's same lane;
* a lane process killed with SIGKILL is restarted by its supervisor, the node
  serves the other lane meanwhile, and no message is claimed twice.
"""

from __future__ import annotations

import http.client
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.lanes import lane_of, lane_of_id
from common.ops import inbox_key, mailbox_key
from federation.membership import Membership
from tests.cluster.harness import Cluster
from tests.deploy.hosts import AI_MEMORY

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(180)]

LANES = 2
SENDER = {"workspace": "default", "project": "lanes-from"}


def _named(lane: int, make: Any, key: Any) -> str:
    return next(make(i) for i in range(1000) if lane_of(key(make(i)), LANES) == lane)


AGENTS = {lane: _named(lane, lambda i: f"agent-{i}", inbox_key) for lane in range(LANES)}
PROJECTS = {lane: _named(lane, lambda i: f"proj-{i}", lambda p: mailbox_key("default", p))
            for lane in range(LANES)}


@pytest.fixture(scope="module")
def lanes_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("lanes"), lanes=LANES)
    try:
        c.start()
        for scope in (SENDER, *({"workspace": "default", "project": p}
                                for p in PROJECTS.values())):
            code, body = c.call("node1", "POST", "/api/v1/sessions", {**scope, "harness": "kimi"})
            assert code == 201, body
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


@pytest.fixture
def c(lanes_cluster: Cluster) -> Iterator[Cluster]:
    """The module's cluster, with every member serving before and after the test."""
    for nid in lanes_cluster.ids:
        lanes_cluster.wait_serving(nid)
    try:
        yield lanes_cluster
    except Exception:
        print(lanes_cluster.logs())
        raise
    for nid in lanes_cluster.ids:
        lanes_cluster.wait_serving(nid, timeout=60)


def notify(c: Cluster, nid: str, agent: str, title: str) -> str:
    code, body = c.call(nid, "POST", "/api/v1/notify",
                        {"target_agent_id": agent, "title": title, "payload": title},
                        headers={"X-Agent-Id": "lanes-tester"})
    assert code == 201, (nid, body)
    return str(body["id"])


def inbox(c: Cluster, nid: str, agent: str, consistency: str = "quorum") -> set[str]:
    code, body = c.call(nid, "GET", f"/api/v1/inbox?agent_id={agent}&consistency={consistency}"
                                     "&limit=200", headers={"X-Agent-Id": agent})
    assert code == 200, (nid, body)
    return {m["id"] for m in body["messages"]}


def send(c: Cluster, nid: str, project: str, text: str) -> str:
    for _ in range(100):  # 503 while a lane restarts: retry the same idempotency key
        try:
            code, body = c.call(nid, "POST", "/api/v1/messages", {
                "to_workspace": "default", "to_project": project,
                "from_workspace": SENDER["workspace"], "from_project": SENDER["project"],
                "body": text}, headers={"Idempotency-Key": text})
        except OSError:
            code, body = 0, {}
        if code == 201:
            return str(body["message_id"])
        assert code in (0, 503), (nid, body)
        time.sleep(0.2)
    raise AssertionError(f"send through {nid} kept failing")


def pending(c: Cluster, nid: str, project: str, consistency: str = "quorum") -> set[str]:
    code, body = c.call(nid, "GET", f"/api/v1/messages?workspace=default&project={project}"
                                     f"&consistency={consistency}&limit=200")
    assert code == 200, (nid, body)
    return {m["id"] for m in body["messages"]}


class Claims:
    """Every acknowledged pop: a message is claimed under one request id only."""

    def __init__(self) -> None:
        self.by_message: dict[str, str] = {}
        self.lock = threading.Lock()

    def pop(self, c: Cluster, nid: str, project: str, rid: str | None = None,
            deadline_s: float = 30.0) -> str | None:
        """One pop through ``nid``, its request id retried on 503 or a cut
        connection (the client rule); the message id or None."""
        rid = rid or str(uuid.uuid4())
        end = time.monotonic() + deadline_s
        while True:
            try:
                code, body = c.call(nid, "POST", "/api/v1/messages/pop",
                                    {"workspace": "default", "project": project,
                                     "request_id": rid}, timeout=15)
            except OSError:
                code, body = 0, {}
            if code == 200:
                break
            assert code in (0, 503), (nid, body)
            assert time.monotonic() < end, f"pop through {nid} kept failing: {code} {body}"
            time.sleep(0.2)
        msg = body["message"]
        if msg is None:
            return None
        with self.lock:
            prev = self.by_message.setdefault(msg["id"], rid)
        assert prev == rid, f"message {msg['id']} claimed twice: {prev}, {rid}"
        return str(msg["id"])

    def drain(self, c: Cluster, nid: str, project: str) -> None:
        while self.pop(c, nid, project) is not None:
            pass


def stream_sees(c: Cluster, nid: str, path: str, headers: dict[str, str], act: Any) -> str:
    """Open the event stream ``path`` on ``nid``, run ``act()`` once it is
    ready, and read until an event carries the id ``act`` returned; the id."""
    port = int(c.url(nid).rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        assert resp.status == 200, (nid, path, resp.status, resp.read()[:300])
        wanted, end = None, time.monotonic() + 15
        while time.monotonic() < end:
            line = resp.readline().decode()
            if wanted is None and line.startswith("event: ready"):
                wanted = act()
            elif wanted is not None and line.startswith("data:") and wanted in line:
                return str(wanted)
        raise AssertionError(f"{path} on {nid}: no event for {wanted}")
    finally:
        conn.close()


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def owner_of(c: Cluster, key: str) -> str:
    return Membership(c.ids[0], c.ids).rendezvous(key)[0]


def test_notes_and_mail_of_both_lanes_through_every_member(c: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    notes: dict[int, set[str]] = {lane: set() for lane in AGENTS}
    for nid in c.ids:
        for lane, agent in AGENTS.items():
            note = notify(c, nid, agent, f"{tag}-{nid}")
            assert lane_of_id(note, LANES) == lane, (note, agent)
            notes[lane].add(note)
    for nid in c.ids:
        for lane, agent in AGENTS.items():
            assert notes[lane] <= inbox(c, nid, agent), (nid, agent)

    # The event streams are served by the key's lane, whichever member and lane took them.
    for i, nid in enumerate(c.ids):
        other = c.ids[(i + 1) % len(c.ids)]
        for agent in AGENTS.values():
            stream_sees(c, nid, f"/api/v1/inbox/stream?agent_id={agent}", {"X-Agent-Id": agent},
                        lambda agent=agent, other=other: notify(c, other, agent, f"{tag}-live"))
        for project in PROJECTS.values():
            stream_sees(c, nid, f"/api/v1/messages/stream?workspace=default&project={project}",
                        {}, lambda project=project, other=other, nid=nid: send(
                            c, other, project, f"{tag}-live-{project}-{nid}"))

    claims = Claims()
    for lane, project in PROJECTS.items():
        sent = set()
        for nid in c.ids:
            for i in range(2):
                mid = send(c, nid, project, f"{tag}-{project}-{nid}-{i}")
                assert lane_of_id(mid, LANES) == lane, (mid, project)
                sent.add(mid)
        for nid in c.ids:
            assert sent <= pending(c, nid, project), (nid, project)
        # A pop through each member; its request id asked again through the
        # next member keeps its answer.
        for i, nid in enumerate(c.ids):
            rid = str(uuid.uuid4())
            first = claims.pop(c, nid, project, rid)
            assert first is not None
            assert claims.pop(c, c.ids[(i + 1) % len(c.ids)], project, rid) == first
        claims.drain(c, c.ids[lane], project)
        assert sent <= set(claims.by_message), sent - set(claims.by_message)
        # The mailbox lives on its lane: that lane of its owner holds it, the other does not.
        owner, key = owner_of(c, mailbox_key("default", project)), mailbox_key("default", project)
        assert key in c.status(owner, lane)["owned_mailboxes"]
        assert key not in c.status(owner, 1 - lane)["owned_mailboxes"]
    c.wait_converged()


def test_cluster_status_shows_a_stopped_members_position_over_every_lane(c: Cluster) -> None:
    """Each lane links to the same lane of every member and keeps its own
    copy of the member's position. With node3 stopped, `cluster status`
    (the real command, against node1's port) shows node3's position as the
    sum of node1's lanes' copies (lane 0's alone before), and node2's
    contact and round trip from the lanes' links."""
    for lane, agent in AGENTS.items():
        notify(c, "node1", agent, f"status-{lane}")
    c.wait_converged()

    def node3_as_node1_sees_it() -> list[int] | None:
        """Per lane of node1, its copy of node3's position, once every lane
        has heard node3 hold all it holds itself (None before)."""
        code, body = c.call("node1", "GET", "/api/v1/cluster/status")
        assert code == 200, body
        seen = [lane["peers"]["node3"].get("vv") for lane in body["lanes"]]
        if any(vv is None or vv != lane["vv"] for vv, lane in zip(seen, body["lanes"],
                                                                  strict=True)):
            return None
        return [sum(vv.values()) for vv in seen]
    end = time.monotonic() + 15
    while (parts := node3_as_node1_sees_it()) is None:
        assert time.monotonic() < end, "node1's lanes never heard node3's position"
        time.sleep(0.1)
    assert all(parts), parts  # each lane holds ops of its own
    c.kill9("node3")
    try:
        result = subprocess.run([*AI_MEMORY, "--url", c.url("node1"), "cluster", "status"],
                                capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stdout + result.stderr
        header, *lines = result.stdout.splitlines()
        rows = {ln.split()[0]: ln for ln in lines if ln.startswith("node")}
        pos_at, rtt_at = header.index("OPLOG POS"), header.index("RTT")
        assert "no (" in rows["node3"], result.stdout
        assert rows["node3"][pos_at:].split()[0] == str(sum(parts)), (parts, result.stdout)
        assert re.match(r"\d+\.\d ms", rows["node2"][rtt_at:]), result.stdout
        assert " ago " in rows["node2"], result.stdout
    finally:
        c.start("node3")


def _refused(c: Cluster, nid: str, lanes: int) -> str:
    """Start ``nid`` with ``lanes`` lanes; it must exit non-zero. Its log lines."""
    proc = c.procs[nid]
    log_from = proc.log.stat().st_size
    proc.lanes = lanes
    try:
        c.start(nid, wait=False)
        assert proc.popen is not None and proc.popen.wait(timeout=60) != 0
    finally:
        proc.lanes = LANES
    return proc.log.read_text()[log_from:]


def test_another_lane_count_is_refused_and_a_wiped_member_has_each_lane_seeded(
        c: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    notes = {lane: {notify(c, "node1", agent, f"wipe-{tag}")} for lane, agent in AGENTS.items()}
    mail = {lane: {send(c, "node2", project, f"wipe-{tag}-{project}-{i}") for i in range(2)}
            for lane, project in PROJECTS.items()}
    c.wait_converged()
    victim = "node3"
    proc = c.procs[victim]
    assert proc.popen is not None and len(proc.lane_pids()) == LANES
    # kill -9 of the supervisor alone: its lanes must not outlive it.
    proc.popen.send_signal(signal.SIGKILL)
    proc.popen.wait(timeout=10)
    c.wait_group_gone(victim, timeout=30)
    files = c.db_files(victim)
    assert len(files) == LANES and all(f.exists() for f in files)
    # Restarted without lanes on its database: the layout it records refuses it.
    log = _refused(c, victim, 1)
    assert re.search(r"is lane 0 of 2 .*this process is lane 0 of 1 .*a node's lane count is "
                     "fixed per cluster", log), log
    for db in files:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    # Wiped and started without lanes, it reaches one lane of each peer:
    # refused before any seeding, with the lane counts named.
    log = _refused(c, victim, 1)
    assert re.search(r"node[12] runs 2 lanes and this member 1: every member of a cluster runs "
                     r"the same lane count", log), log
    assert "seeded" not in log and not files[0].exists(), log
    log_from = proc.log.stat().st_size
    c.restart(victim)
    c.wait_serving(victim, timeout=60)
    log = proc.log.read_text()[log_from:]
    for db in files:  # each lane's own file, seeded from the same lane of a peer
        assert re.search(rf"no database at {re.escape(str(db))}: seeded from node[12]'s copy",
                         log), log
    c.wait_converged()
    for lane, agent in AGENTS.items():
        assert notes[lane] <= inbox(c, victim, agent, consistency="local"), (lane, agent)
    claims = Claims()
    for lane, project in PROJECTS.items():
        assert mail[lane] <= pending(c, victim, project, consistency="local"), (lane, project)
        claims.drain(c, victim, project)
        assert mail[lane] <= set(claims.by_message)


def test_a_killed_lane_is_restarted_and_claims_stay_once(c: Cluster) -> None:
    lane = 1
    project = PROJECTS[lane]
    node = owner_of(c, mailbox_key("default", project))
    tag = uuid.uuid4().hex[:6]
    sent = {send(c, c.ids[i % 3], project, f"kill-{tag}-{i}") for i in range(12)}
    claims = Claims()
    claims.pop(c, node, project)
    supervisor = c.procs[node].popen
    assert supervisor is not None
    log_from = c.procs[node].log.stat().st_size
    errors: list[BaseException] = []
    stop = threading.Event()

    def popping() -> None:  # pops through the node the whole time, retrying on 503
        try:
            while not stop.is_set() and claims.pop(c, node, project) is not None:
                time.sleep(0.05)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    popper = threading.Thread(target=popping, daemon=True)
    popper.start()
    old = c.kill_lane(node, lane, signal.SIGKILL)
    # Once the lane is gone, the other lane serves the node's port alone. (A
    # connection the kernel queued on the dying lane's socket is reset: the
    # client retries, as the popper does.)
    end = time.monotonic() + 10
    while _running(old):
        assert time.monotonic() < end, f"lane {lane} ({old}) still runs after SIGKILL"
        time.sleep(0.01)
    # The first connection after the kill may still have been queued on the
    # dying lane's socket (docs/lanes.md, "Operations with lanes": reset, the
    # client retries); the next one reaches the lane that serves.
    try:
        notify(c, node, AGENTS[1 - lane], f"kill-{tag}")
    except ConnectionResetError:
        time.sleep(0.2)
        notify(c, node, AGENTS[1 - lane], f"kill-{tag}")
    end = time.monotonic() + 30
    while (new := c.procs[node].lane_pids().get(lane)) in (None, old):
        assert time.monotonic() < end, "the supervisor did not restart the lane"
        time.sleep(0.05)
    assert supervisor.poll() is None
    c.wait_serving(node, timeout=30)
    stop.set()
    popper.join(timeout=60)
    assert not errors, errors
    claims.drain(c, node, project)
    assert sent == set(claims.by_message) & sent, sent - set(claims.by_message)
    log = c.procs[node].log.read_text()[log_from:]
    assert f"lane {lane} exited with status -9; restarting it" in log, log
    assert new != old
    c.wait_converged()
    for nid in c.ids:
        assert not sent & pending(c, nid, project, consistency="local"), nid
