"""The CLI as a new user meets it, against a real three-node `cluster up`:
``--wait`` on the push streams, the flags the README suggests, the hints
for mail that waits for a harness or a project that does not exist, the
``--url`` forms people type, and a node that crashes under `cluster up`.

Commands that block (``--wait``) run as their own process, since click's
CliRunner swaps the interpreter's stdout and cannot run in two threads.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_e2e_cluster import Cluster, cluster, eventually  # noqa: F401 (fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def real(request: pytest.FixtureRequest) -> Cluster:
    """The module's `cluster up` (tests.cli.test_e2e_cluster's fixture)."""
    up: Cluster = request.getfixturevalue("cluster")
    return up
ROOT = Path(__file__).resolve().parents[2]
B = ["--workspace", "acme", "--project", "receiver"]


def spawn(procs: list[subprocess.Popen[str]], url: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "cli", "--url", url, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    procs.append(proc)
    return proc


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    """Wait for ``proc``; on timeout kill it and fail with what it printed."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"{proc.args} still running after {timeout}s:\n{out}\n{err}") from None
    return proc.returncode, out, err


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test spawned; any still running at its end are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def sessions(real: Cluster) -> None:
    for project, harness in (("sender", "claude"), ("receiver", "claude"),
                             ("receiver", "codex")):
        r = real.run(0, "session", "start", "--workspace", "acme", "--project", project,
                        "--harness", harness)
        assert r.exit_code == 0, r.output


def send(real: Cluster, node: int, body: str, *extra: str) -> str:
    r = real.run(node, "message", "send", "--to-workspace", "acme", "--to-project",
                    "receiver", "--from-workspace", "acme", "--from-project", "sender",
                    *extra, body, "--json")
    assert r.exit_code == 0, r.output
    return str(json.loads(r.stdout)["message_id"])


def test_inbox_wait_prints_a_notification_sent_through_another_node(
        real: Cluster, procs: list[subprocess.Popen[str]]) -> None:
    waiting = spawn(procs, real.urls[2], "inbox", "--agent-id", "wendy", "--wait",
                    "--timeout", "30")
    time.sleep(1.0)  # the command is blocked on its stream by now
    assert waiting.poll() is None
    sent = real.run(0, "notify", "wendy", "--agent-id", "alice", "--title", "wake up", "now")
    assert sent.exit_code == 0, sent.output
    t0 = time.monotonic()
    rc, out, err = finish(waiting, 20)
    assert rc == 0, err
    assert "wake up" in out and "from alice" in out
    assert time.monotonic() - t0 < 10


def test_inbox_wait_with_nothing_times_out_with_exit_8(
        real: Cluster, procs: list[subprocess.Popen[str]]) -> None:
    t0 = time.monotonic()
    proc = spawn(procs, real.urls[1], "inbox", "--agent-id", "nobody", "--wait",
                 "--timeout", "1")
    rc, out, err = finish(proc, 20)
    assert rc == 8, err
    assert "nothing arrived for nobody within 1s" in err
    assert out == "" and "Traceback" not in err
    assert time.monotonic() - t0 < 10


def test_inbox_wait_shows_what_is_already_there_at_once(
        real: Cluster, procs: list[subprocess.Popen[str]]) -> None:
    assert real.run(1, "notify", "olga", "--agent-id", "alice", "--title", "old news",
                       "x").exit_code == 0
    proc = spawn(procs, real.urls[2], "inbox", "--agent-id", "olga", "--wait",
                 "--timeout", "10")
    rc, out, err = finish(proc, 20)
    assert rc == 0, err
    assert "old news" in out


def test_message_pop_wait_claims_mail_sent_later_through_another_node(
        real: Cluster, procs: list[subprocess.Popen[str]]) -> None:
    sessions(real)
    waiting = spawn(procs, real.urls[2], "message", "pop", *B, "--wait", "--timeout", "30")
    time.sleep(1.0)
    assert waiting.poll() is None  # nothing pending: it waits
    msg_id = send(real, 0, "please review PR 7")
    rc, out, err = finish(waiting, 20)
    assert rc == 0, err
    assert out.startswith(f"claimed {msg_id} from acme/sender")
    assert "please review PR 7" in out
    listed = real.run(1, "message", "list", *B, "--json")
    assert msg_id not in {m["id"] for m in json.loads(listed.stdout)["messages"]}


def test_message_pop_wait_times_out_with_exit_8(
        real: Cluster, procs: list[subprocess.Popen[str]]) -> None:
    sessions(real)
    proc = spawn(procs, real.urls[0], "message", "pop", *B, "--wait", "--timeout", "1")
    rc, _, err = finish(proc, 20)
    assert rc == 8, err
    assert "nothing arrived in acme/receiver within 1s" in err


def test_pop_without_agent_names_the_harness_the_mail_waits_for(real: Cluster) -> None:
    sessions(real)
    msg_id = send(real, 1, "for codex only", "--to-agent", "codex", "--from-agent", "kimi")
    popped = real.run(2, "message", "pop", *B)
    assert popped.exit_code == 0, popped.output
    assert "no pending message in acme/receiver" in popped.stderr
    assert ("1 message in acme/receiver waits for harness codex: pop it with "
            "`ai-memory message pop --workspace acme --project receiver --agent codex`"
            in popped.stderr)
    claimed = real.run(0, "message", "pop", *B, "--agent", "codex", "--json")
    reply = json.loads(claimed.stdout)
    assert reply["message"]["id"] == msg_id
    assert reply["provenance"]["from_agent"] == "kimi"  # --from-agent, no session of sender's


def test_list_and_pop_of_a_project_that_does_not_exist_say_so(real: Cluster) -> None:
    for cmd in ("list", "pop"):
        r = real.run(1, "message", cmd, "--workspace", "acme", "--project", "no-such")
        assert r.exit_code == 3, r.output
        assert "project acme/no-such does not exist" in r.stderr
    wait = real.run(1, "message", "pop", "--workspace", "acme", "--project", "no-such",
                       "--wait", "--timeout", "5")
    assert wait.exit_code == 3 and "does not exist" in wait.stderr


def test_inbox_since_and_tier_filter(real: Cluster) -> None:
    for tier in ("short", "long"):
        r = real.run(0, "notify", "tess", "--agent-id", "alice", "--title", f"a {tier} one",
                        "--tier", tier, "x")
        assert r.exit_code == 0, r.output
    only_long = real.run(2, "inbox", "--agent-id", "tess", "--tier", "long", "--json")
    assert [m["tier"] for m in json.loads(only_long.stdout)["messages"]] == ["long"]
    future = real.run(2, "inbox", "--agent-id", "tess", "--since", "2999-01-01T00:00:00Z",
                         "--json")
    assert json.loads(future.stdout)["messages"] == []
    past = real.run(2, "inbox", "--agent-id", "tess", "--since", "2000-01-01T00:00:00Z",
                       "--json")
    assert len(json.loads(past.stdout)["messages"]) == 2


def test_url_without_scheme_works_and_an_api_path_is_explained(real: Cluster) -> None:
    bare = real.urls[0].removeprefix("http://")
    from click.testing import CliRunner

    from cli.main import cli

    ok = CliRunner().invoke(cli, ["--url", bare, "health", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["node_id"] == "node1"
    wrong = CliRunner().invoke(cli, ["--url", real.urls[0] + "/api/v1", "health"])
    assert wrong.exit_code == 2
    assert f"use --url {real.urls[0]} (the CLI adds /api/v1/... to it)" in wrong.stderr


def test_a_write_without_quorum_names_the_key_that_retries_it_once(real: Cluster) -> None:
    data = str(real.data)
    for node in ("node2", "node3"):
        assert real.run(0, "cluster", "stop", node, "--data", data).exit_code == 0
    try:
        lost = real.run(0, "notify", "quinn", "--agent-id", "alice", "--title", "maybe", "x")
        assert lost.exit_code == 6, lost.output
        assert "quorum_not_met" in lost.stderr
        assert "the write may still land" in lost.stderr
        key = re.search(r"--idempotency-key (\S+);", lost.stderr)
        assert key is not None, lost.stderr
    finally:
        for node in ("node2", "node3"):
            assert real.run(0, "cluster", "start", node, "--data", data).exit_code == 0
    # Retried as the hint says (as often as it takes the members to come back).
    eventually(lambda: real.run(0, "notify", "quinn", "--agent-id", "alice", "--title",
                                "maybe", "x", "--idempotency-key", key.group(1)).exit_code == 0,
               timeout=60)
    inbox = real.run(1, "inbox", "--agent-id", "quinn", "--json")
    titles = [m["title"] for m in json.loads(inbox.stdout)["messages"]]
    assert titles == ["maybe"]  # the first attempt landed; the retry did not add a second


def test_inbox_wait_survives_a_restart_of_its_node(
        real: Cluster, procs: list[subprocess.Popen[str]]) -> None:
    waiting = spawn(procs, real.urls[2], "inbox", "--agent-id", "zed", "--wait",
                    "--timeout", "60")
    time.sleep(1.0)
    data = str(real.data)
    stopped = real.run(0, "cluster", "stop", "node3", "--data", data)
    assert stopped.exit_code == 0, stopped.output
    sent = real.run(0, "notify", "zed", "--agent-id", "alice", "--title", "while you were out",
                    "x")
    assert sent.exit_code == 0, sent.output
    assert waiting.poll() is None  # still waiting, reconnecting
    started = real.run(0, "cluster", "start", "node3", "--data", data)
    assert started.exit_code == 0, started.output
    rc, out, err = finish(waiting, 40)
    assert rc == 0, err
    assert "while you were out" in out
    assert "reconnecting" in err


def test_a_node_crashing_under_cluster_up_is_restarted_and_the_others_keep_serving(
        real: Cluster) -> None:
    status = json.loads(real.run(0, "cluster", "status", "--json").stdout)
    assert status  # the cluster is whole before the crash
    state = json.loads((Path(str(real.data)) / "cluster.json").read_text())
    pid = int(state["nodes"]["node2"]["pid"])
    os.kill(pid, signal.SIGKILL)  # the node's own failure, not a `cluster stop`
    for url in (real.urls[0], real.urls[2]):
        with urllib.request.urlopen(url + "/api/v1/health", timeout=5) as r:
            assert r.status == 200
    sent = real.run(0, "notify", "rita", "--agent-id", "alice", "--title", "still up", "x")
    assert sent.exit_code == 0, sent.output  # W=2 of the two that are left

    def back() -> bool:
        try:
            with urllib.request.urlopen(real.urls[1] + "/api/v1/health", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    eventually(back, timeout=30)
    node2 = json.loads((Path(str(real.data)) / "cluster.json").read_text())["nodes"]["node2"]
    assert node2["pid"] not in (None, pid)  # a new process, started by the supervisor
    eventually(lambda: "still up" in real.run(1, "inbox", "--agent-id", "rita").stdout)
    assert re.search(r"quorum healthy", real.run(1, "cluster", "status").stdout)


def test_a_message_command_naming_no_project_says_what_to_pass(
        real: Cluster, procs: list[subprocess.Popen[str]]) -> None:
    sessions(real)  # projects exist: the node could guess one, and must not
    for args, what, flags in ((["pop"], "popped", "--workspace and --project"),
                              (["cancel", "--all"], "cancelled", "--workspace and --project"),
                              (["send", "--to-workspace", "acme", "--to-project", "receiver",
                                "hi"], "sent", "--from-workspace and --from-project")):
        r = real.run(0, "message", *args)
        assert r.exit_code == 4, r.output
        assert r.stderr.startswith(f"error: no project was named, so nothing was {what}: "
                                   f"pass {flags}"), r.stderr
        assert "AI_MEMORY_WORKSPACE and AI_MEMORY_PROJECT" in r.stderr
        assert ".ai-memory.toml" in r.stderr and "not named" not in r.stderr
    waiting = spawn(procs, real.urls[1], "message", "pop", "--wait", "--timeout", "5")
    rc, _, err = finish(waiting, 20)
    assert rc == 4 and "nothing was popped: pass --workspace and --project" in err, err


def test_cli_mail_explains_agent_other_and_its_nature(real: Cluster) -> None:
    sessions(real)
    msg_id = send(real, 0, "from a person at a terminal")
    listed = real.run(1, "message", "list", *B)
    assert f"{msg_id}  acme/sender (agent other) -> acme/receiver" in listed.stdout
    assert "agent other: no harness named: sent from the CLI" in listed.stderr
    popped = real.run(2, "message", "pop", *B, "--id", msg_id)
    assert popped.exit_code == 0, popped.output
    lines = popped.stdout.splitlines()
    assert lines[0] == f"claimed {msg_id} from acme/sender (agent other)"
    assert lines[1].startswith("  agent other: no harness named")
    assert "nature: unknown (the sender did not say how it knows)" in lines


def test_install_hooks_names_every_member_of_the_cluster(real: Cluster, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from cli.main import cli

    for node in range(3):  # asked through any node: that one first, then its peers
        done = CliRunner().invoke(cli, ["--url", real.urls[node], "install-hooks", "--harness",
                                        "claude-code", "--dir", str(tmp_path), "--write"])
        assert done.exit_code == 0, done.output
        want = [real.urls[node], *(u for u in real.urls if u != real.urls[node])]
        assert done.stderr.startswith(f"the entries use {', '.join(want)}: every member of "
                                      f"node{node + 1}'s cluster"), done.stderr
    bridge = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["ai-memory"]
    assert sorted(bridge["args"][2].split(",")) == sorted(real.urls)
    hooks = json.loads((tmp_path / ".claude" / "settings.json").read_text())["hooks"]
    start = hooks["SessionStart"][0]["hooks"][0]["command"]
    assert sorted(start.rsplit("--url ", 1)[1].split(",")) == sorted(real.urls)


def test_whoami_on_the_anonymous_cluster_says_anonymous_mode(real: Cluster) -> None:
    assert real.run(0, "user", "add", "wanda").exit_code == 0
    made = real.run(0, "key", "create", "--user", "wanda", "--agent", "wanda-bot", "--json")
    key = json.loads(made.stdout)["key"]
    nobody = real.run(1, "--agent-id", "bob", "whoami")
    assert nobody.output.startswith("(anonymous), agent bob; the node runs in anonymous mode")

    def keyed() -> bool:  # the key reaches the other members soon after it is made
        return real.run(2, "--key", key, "whoami").exit_code == 0

    eventually(keyed)
    who = real.run(2, "--key", key, "whoami").output
    assert who.startswith("wanda, agent wanda-bot (bound to the key), key key_")
    assert "the node runs in anonymous mode, but a key is still checked" in who
    assert "keys mode" not in who


def test_inbox_with_a_key_bound_to_an_agent_needs_no_agent_id(real: Cluster) -> None:
    assert real.run(0, "user", "add", "kai").exit_code == 0
    made = real.run(0, "key", "create", "--user", "kai", "--agent", "kai-bot", "--json")
    key = json.loads(made.stdout)["key"]
    sent = real.run(0, "notify", "kai-bot", "--agent-id", "alice", "--title", "t", "for the bot")
    assert sent.exit_code == 0, sent.output

    def shown() -> bool:  # the key and the notification reach node 3
        r = real.run(2, "--key", key, "inbox", "--json")
        return r.exit_code == 0 and [m["body"] for m in json.loads(r.stdout)["messages"]] == [
            "for the bot"]

    eventually(shown)
    nobody = real.run(2, "inbox")  # no key, no agent: the command says what to pass
    assert nobody.exit_code != 0 and "pass --agent-id" in nobody.output
