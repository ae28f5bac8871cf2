"""``ai-memory listen`` with real processes: a three-node cluster of ``serve``
processes (tests/cluster/harness.py) and the listener as its own process.

Each event's command appends the event's id to a file; the tests count the
lines: every event handled, none twice, across a kill -9 of the node the
listener follows (it fails over to the next), a kill -9 of the listener
itself (it resumes from its state file), a failing command (retried, then
dead-lettered, and not run again), and two listeners claiming the same
mailbox (each message popped and handled once).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import ROOT, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

APPEND = 'printf "%s %s\\n" "$AI_MEMORY_EVENT_ID" "$AI_MEMORY_SUBJECT" >> "$LISTEN_OUT"'
PROJ = {"workspace": "default", "project": "listen-box"}
SENDER = {"workspace": "default", "project": "listen-sender"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


class Listener:
    """One ``ai-memory listen`` process; its stdout and stderr go to files."""

    def __init__(self, tmp: Path, name: str, args: list[str], out: Path) -> None:
        self.stdout = tmp / f"{name}.stdout"
        self.stderr = tmp / f"{name}.stderr"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LISTEN_OUT": str(out),
               "XDG_STATE_HOME": str(tmp / "state")}
        with open(self.stdout, "ab") as so, open(self.stderr, "ab") as se:
            self.proc = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=ROOT,
                                         env=env, stdout=so, stderr=se)

    def err(self) -> str:
        return self.stderr.read_text()

    def wait_following(self, times: int = 1, timeout: float = 20) -> None:
        wait_for(lambda: self.err().count("listen: following") >= times, timeout,
                 lambda: f"listener never connected:\n{self.err()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)


def wait_for(cond: Callable[[], bool], timeout: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(why())


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def notify(c: Cluster, nid: str, title: str) -> str:
    code, body = c.call(nid, "POST", "/api/v1/notify", {"target_agent_id": "bob", "title": title},
                        headers={"X-Agent-Id": "alice", "Idempotency-Key": title})
    assert code == 201, body
    return str(body["id"])


def urls(c: Cluster) -> str:
    return ",".join(c.url(n) for n in c.ids)


def listen_args(c: Cluster, state: Path, *extra: str) -> list[str]:
    return ["--agent-id", "bob", "listen", "--url", urls(c), "--state", str(state), *extra]


def assert_once(out: Path, ids: list[str]) -> None:
    seen = Counter(line.split()[0] for line in lines(out))
    assert set(seen) == set(ids), (sorted(set(ids) - set(seen)), sorted(set(seen) - set(ids)))
    twice = {k: n for k, n in seen.items() if n > 1}
    assert not twice, twice


def test_exec_runs_each_event_once_across_a_node_kill_and_a_listener_restart(
        cluster: Cluster, tmp_path: Path) -> None:
    c, out, state = cluster, tmp_path / "out.txt", tmp_path / "bob.json"
    lst = Listener(tmp_path, "l1", listen_args(c, state, "--exec", APPEND), out)
    lst.wait_following()
    ids = [notify(c, "node2", f"before-{i}") for i in range(20)]
    wait_for(lambda: len(lines(out)) >= 20, 30, lambda: f"{lines(out)}\n{lst.err()}")

    c.kill9("node1")  # the node the listener follows: it moves to node2
    ids += [notify(c, "node3", f"during-{i}") for i in range(20)]
    wait_for(lambda: len(lines(out)) >= 40, 60, lambda: f"{len(lines(out))}\n{lst.err()}")
    assert "listen: following inbox:bob on " + c.url("node2") in lst.err()
    c.restart("node1")

    lst.stop(signal.SIGKILL)  # the listener itself: mail sent meanwhile waits for it
    ids += [notify(c, "node1", f"offline-{i}") for i in range(10)]
    again = Listener(tmp_path, "l2", listen_args(c, state, "--exec", APPEND), out)
    wait_for(lambda: len(lines(out)) >= 50, 60, lambda: f"{len(lines(out))}\n{again.err()}")
    time.sleep(1.0)  # anything run twice would show by now
    again.stop()
    assert again.proc.returncode == 0, again.err()
    assert_once(out, ids)


def test_json_prints_one_event_per_line(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    lst = Listener(tmp_path, "j", listen_args(c, tmp_path / "j.json", "--json"), tmp_path / "x")
    lst.wait_following()
    ids = [notify(c, "node3", f"json-{i}") for i in range(3)]
    wait_for(lambda: len(lines(lst.stdout)) >= 3, 30, lst.err)
    lst.stop()
    events = [json.loads(line) for line in lines(lst.stdout)]
    assert [e["id"] for e in events] == ids
    assert {e["event"] for e in events} == {"notify"}
    assert events[0]["data"]["notification"]["title"] == "json-0"
    assert all(e["cursor"].startswith("v1.") for e in events)


def test_a_failing_command_is_retried_then_dead_lettered_and_not_run_again(
        cluster: Cluster, tmp_path: Path) -> None:
    c, out, state = cluster, tmp_path / "runs.txt", tmp_path / "f.json"
    failing = f'{APPEND}; [ "$AI_MEMORY_SUBJECT" != bad ]'
    args = listen_args(c, state, "--exec", failing, "--retries", "2")
    lst = Listener(tmp_path, "f", args, out)
    lst.wait_following()
    bad = notify(c, "node1", "bad")
    good = notify(c, "node1", "good")
    dead = Path(f"{state}.dead.jsonl")
    wait_for(lambda: dead.exists() and len(lines(out)) >= 4, 30, lst.err)
    lst.stop()
    runs = Counter(line.split()[0] for line in lines(out))
    assert runs == {bad: 3, good: 1}
    [letter] = [json.loads(line) for line in lines(dead)]
    assert letter["event"]["id"] == bad and letter["attempts"] == 3
    assert letter["status"] == "exit 1"
    assert f"notify {bad} failed after 3 run(s)" in lst.err()
    # The dead-lettered event is finished: a restart does not run it again.
    again = Listener(tmp_path, "f2", args, out)
    again.wait_following()
    later = notify(c, "node2", "later")
    wait_for(lambda: later in {line.split()[0] for line in lines(out)}, 30, again.err)
    again.stop()
    assert Counter(line.split()[0] for line in lines(out)) == {bad: 3, good: 1, later: 1}


def _start_sessions(c: Cluster) -> None:
    for scope in (PROJ, SENDER):
        code, body = c.call("node1", "POST", "/api/v1/sessions", {**scope, "harness": "codex"})
        assert code == 201, body


def _send(c: Cluster, nid: str, subject: str) -> str:
    code, body = c.call(nid, "POST", "/api/v1/messages", {
        "to_workspace": PROJ["workspace"], "to_project": PROJ["project"],
        "from_workspace": SENDER["workspace"], "from_project": SENDER["project"],
        "subject": subject, "body": f"body of {subject}"}, headers={"Idempotency-Key": subject})
    assert code == 201, body
    return str(body["message_id"])


def test_claim_pops_each_message_once_with_two_listeners(cluster: Cluster,
                                                         tmp_path: Path) -> None:
    c, out = cluster, tmp_path / "claimed.txt"
    _start_sessions(c)
    claim_env = 'printf "%s %s\\n" "$AI_MEMORY_EVENT_ID" "$AI_MEMORY_CLAIMED" >> "$LISTEN_OUT"'
    listeners = [Listener(tmp_path, f"c{i}", [
        "listen", "--url", urls(c), "--workspace", PROJ["workspace"], "--project",
        PROJ["project"], "--claim", "--exec", claim_env, "--state",
        str(tmp_path / f"c{i}.json")], out) for i in range(2)]
    for lst in listeners:
        lst.wait_following()
    ids = [_send(c, ("node1", "node2", "node3")[i % 3], f"mail-{i}") for i in range(15)]
    wait_for(lambda: len(lines(out)) >= 15, 60, lambda: "\n".join(x.err() for x in listeners))
    time.sleep(1.0)
    for lst in listeners:
        lst.stop()
    assert_once(out, ids)
    assert {line.split()[1] for line in lines(out)} == {"1"}
    code, box = c.call("node2", "GET", "/api/v1/messages?box=inbox&workspace=default"
                       "&project=listen-box&limit=100")
    assert code == 200 and box["messages"] == [], box


def test_event_env_names_the_main_fields() -> None:
    from cli.listen_exec import event_env

    env = event_env({"event": "notify", "id": "n1", "data": {"agent_id": "bob", "notification": {
        "id": "n1", "from": "alice", "to": "bob", "title": "hi", "priority": 5}}}, 1)
    assert env["AI_MEMORY_FROM"] == "alice" and env["AI_MEMORY_SUBJECT"] == "hi"
    assert env["AI_MEMORY_EVENT"] == "notify" and env["AI_MEMORY_MESSAGE_ID"] == "n1"
    assert not any("KEY" in k for k in env)
    # a requeued message's live event names its id and delivery only: a
    # claimed one's details come from the claim
    requeued = {"event": "message", "id": "m1", "data": {
        "workspace": "w", "project": "p",
        "message": {"id": "m1", "state": "pending", "deliveries": 2, "requeued": True}},
        "claimed": {"message": {"id": "m1", "subject": "the task", "from_agent": "alice",
                                "from_workspace_id": "w", "from_project_id": "q"}}}
    env = event_env(requeued, 1)
    assert env["AI_MEMORY_SUBJECT"] == "the task" and env["AI_MEMORY_FROM"] == "alice"
    assert env["AI_MEMORY_FROM_PROJECT"] == "w/q" and env["AI_MEMORY_WORKSPACE"] == "w"


def test_a_listener_killed_after_its_claim_gets_the_message_back(cluster: Cluster,
                                                                 tmp_path: Path) -> None:
    """The first run kills the listener (its parent, $PPID) after the pop and
    fails: the next start pops again with the saved request id, gets the same
    message and runs the command once."""
    c, out, marker = cluster, tmp_path / "claimed.txt", tmp_path / "killed-once"
    _start_sessions(c)
    cmd = (f'if [ ! -e {marker} ]; then touch {marker}; kill -9 "$PPID"; exit 1; fi; '
           'printf "%s %s\\n" "$AI_MEMORY_EVENT_ID" "$AI_MEMORY_CLAIMED" >> "$LISTEN_OUT"')
    args = ["listen", "--url", urls(c), "--workspace", PROJ["workspace"], "--project",
            PROJ["project"], "--claim", "--exec", cmd, "--state", str(tmp_path / "k.json")]
    first = Listener(tmp_path, "k1", args, out)
    first.wait_following()
    mid = _send(c, "node2", "crash-mail")
    first.proc.wait(timeout=30)
    assert first.proc.returncode == -signal.SIGKILL and marker.exists()
    assert lines(out) == []
    code, box = c.call("node1", "GET", "/api/v1/messages?box=inbox&workspace=default"
                       "&project=listen-box&limit=100")
    assert code == 200 and box["messages"] == [], box  # claimed, not yet run
    second = Listener(tmp_path, "k2", args, out)
    wait_for(lambda: len(lines(out)) >= 1, 30, second.err)
    time.sleep(1.0)
    second.stop()
    assert lines(out) == [f"{mid} 1"]


def test_a_leased_claim_of_a_killed_listener_goes_to_the_other_listener(
        cluster: Cluster, tmp_path: Path) -> None:
    """Two listeners with --claim --lease 2. The first to run the command for
    one message kills its own listener (kill -9 of $PPID) mid-lease, without
    finishing. The lease runs out, the stream announces the message again
    (requeued, delivery 2), and the surviving listener claims it, runs the
    command (with the message's subject, from its claim: the requeue's event
    names only the id) and completes it; every message sent after is run
    once and completed by the survivor. (Sent before the kill, a message the
    killed listener had run but not yet completed would be run again: a
    lease is at least once.)"""
    c, out, marker = cluster, tmp_path / "ran.txt", tmp_path / "killed-once"
    _start_sessions(c)
    cmd = ('if [ "$AI_MEMORY_SUBJECT" = "doomed" ] && [ ! -e ' + str(marker) + ' ]; then '
           f'touch {marker}; kill -9 "$PPID"; exit 0; fi; '
           'printf "%s %s\\n" "$AI_MEMORY_EVENT_ID" "$AI_MEMORY_SUBJECT" >> "$LISTEN_OUT"')
    listeners = [Listener(tmp_path, f"l{i}", [
        "listen", "--url", urls(c), "--workspace", PROJ["workspace"], "--project",
        PROJ["project"], "--claim", "--lease", "2", "--exec", cmd, "--state",
        str(tmp_path / f"l{i}.json")], out) for i in range(2)]
    for lst in listeners:
        lst.wait_following()
    doomed = _send(c, "node1", "doomed")
    wait_for(lambda: marker.exists(), 30, lambda: "\n".join(x.err() for x in listeners))
    wait_for(lambda: any(x.proc.poll() is not None for x in listeners), 10,
             lambda: "\n".join(x.err() for x in listeners))
    ids = [_send(c, ("node1", "node2", "node3")[i % 3], f"mail-{i}") for i in range(6)]
    wait_for(lambda: len(lines(out)) >= 7, 60, lambda: "\n".join(x.err() for x in listeners))
    time.sleep(1.0)
    killed = [x for x in listeners if x.proc.poll() is not None]
    assert [x.proc.returncode for x in killed] == [-signal.SIGKILL]
    for lst in listeners:
        lst.stop()
    assert_once(out, [*ids, doomed])
    assert f"{doomed} doomed" in lines(out)  # delivery 2 ran with the message's subject
    code, box = c.call("node2", "GET", "/api/v1/messages?box=outbox&workspace=default"
                       "&project=listen-sender&all=true&limit=100")
    assert code == 200, box
    rows = {m["id"]: m for m in box["messages"]}
    assert {rows[m]["completion"]["result"] for m in [*ids, doomed]} == {"done"}
    assert rows[doomed]["deliveries"] == 2
    assert {rows[m]["deliveries"] for m in ids} == {1}
