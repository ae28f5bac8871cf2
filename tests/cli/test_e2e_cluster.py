"""The CLI against a real three-node cluster started by `ai-memory cluster up`.

One cluster for the module; every command runs in-process through click's
CliRunner against real daemons, so this checks the CLI's requests and its
reading of real replies (not the stub's), across nodes: a write sent to one
node is read from another.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import cli
from tests.cli.test_cluster_up import free_base_port

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


class Cluster:
    def __init__(self, base: int, data: Path | None = None) -> None:
        self.urls = [f"http://127.0.0.1:{base + i}" for i in range(3)]
        self.data = data

    def run(self, node: int, *args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(cli, ["--url", self.urls[node], *args], input=input)


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Memory reads are local to a node: a write acknowledged by W members reaches the rest soon."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the cluster did not converge in time"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data: Path = tmp_path_factory.mktemp("cluster")
    base = free_base_port(3)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli",
            "cluster",
            "up",
            "--nodes",
            "3",
            "--base-port",
            str(base),
            "--data",
            str(data),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if "Ctrl-C stops every node." in line:
            break
    else:
        proc.wait(30)
        pytest.fail("cluster up never became ready:\n" + "".join(lines))
    try:
        yield Cluster(base, data)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, "".join(lines) + out


def test_health_on_every_node(cluster: Cluster) -> None:
    for i in range(3):
        result = cluster.run(i, "health", "--json")
        assert result.exit_code == 0, result.output
        reply = json.loads(result.stdout)
        assert reply["node_id"] == f"node{i + 1}" and reply["federation_enabled"] is True


def test_notify_on_one_node_is_in_the_inbox_on_another(cluster: Cluster) -> None:
    sent = cluster.run(
        0,
        "--agent-id",
        "alice",
        "notify",
        "bob",
        "--title",
        "OKR review",
        "--priority",
        "7",
        "draft is ready",
        "--json",
    )
    assert sent.exit_code == 0, sent.output
    note_id = json.loads(sent.stdout)["notification_id"]
    inbox = cluster.run(2, "inbox", "--agent-id", "bob", "--json")
    assert inbox.exit_code == 0, inbox.output
    messages = {m["id"]: m for m in json.loads(inbox.stdout)["messages"]}
    assert messages[note_id]["payload"] == "draft is ready"
    assert messages[note_id]["from"] == "alice"
    text = cluster.run(1, "inbox", "--agent-id", "bob", "--mark-read")
    assert "OKR review" in text.stdout
    after = cluster.run(2, "inbox", "--agent-id", "bob", "--json")
    assert note_id not in {m["id"] for m in json.loads(after.stdout)["messages"]}


def test_memory_lifecycle_across_nodes(cluster: Cluster) -> None:
    stored = cluster.run(
        0,
        "--agent-id",
        "alice",
        "memories",
        "store",
        "--title",
        "Deploy steps",
        "--tier",
        "mid",
        "--namespace",
        "team/ops",
        "--tag",
        "ops",
        "--json",
        input="1. build\n2. ship\n",
    )
    assert stored.exit_code == 0, stored.output
    memory_id = json.loads(stored.stdout)["id"]
    got = cluster.run(0, "memories", "get", memory_id)
    assert got.exit_code == 0, got.output
    assert "    1. build\n    2. ship" in got.stdout
    eventually(lambda: cluster.run(2, "memories", "get", memory_id).exit_code == 0)
    eventually(lambda: cluster.run(1, "memories", "get", memory_id).exit_code == 0)
    listed = cluster.run(1, "memories", "list", "--namespace", "team/ops", "--json")
    assert memory_id in {m["id"] for m in json.loads(listed.stdout)["memories"]}
    assert cluster.run(1, "--agent-id", "alice", "memories", "promote", memory_id).exit_code == 0
    promoted = json.loads(cluster.run(1, "memories", "get", memory_id, "--json").stdout)
    assert promoted["tier"] == "long"
    eventually(
        lambda: (
            json.loads(cluster.run(0, "memories", "get", memory_id, "--json").stdout)["tier"]
            == "long"
        )
    )
    assert cluster.run(2, "--agent-id", "alice", "memories", "delete", memory_id).exit_code == 0
    assert cluster.run(2, "memories", "get", memory_id).exit_code == 3
    eventually(lambda: cluster.run(0, "memories", "get", memory_id).exit_code == 3)


def test_project_mail_send_list_pop_cancel_across_nodes(cluster: Cluster) -> None:
    for project, harness in (("project-a", "kimi"), ("project-b", "claude-code")):
        started = cluster.run(
            0,
            "session",
            "start",
            "--workspace",
            "default",
            "--project",
            project,
            "--harness",
            harness,
        )
        assert started.exit_code == 0, started.output
    refused = cluster.run(
        1,
        "message",
        "send",
        "--to-workspace",
        "default",
        "--to-project",
        "nowhere",
        "--from-workspace",
        "default",
        "--from-project",
        "project-a",
        "hello",
    )
    assert refused.exit_code == 3, refused.output

    sent = cluster.run(
        1,
        "message",
        "send",
        "--to-workspace",
        "default",
        "--to-project",
        "project-b",
        "--from-workspace",
        "default",
        "--from-project",
        "project-a",
        "--subject",
        "export endpoint",
        "--json",
        input="Add /v1/export\n",
    )
    assert sent.exit_code == 0, sent.output
    message_id = json.loads(sent.stdout)["message_id"]

    listed = cluster.run(
        2, "message", "list", "--workspace", "default", "--project", "project-b", "--json"
    )
    assert message_id in {m["id"] for m in json.loads(listed.stdout)["messages"]}

    scope = ["--workspace", "default", "--project", "project-b"]
    popped = cluster.run(0, "message", "pop", *scope, "--request-id", "e2e-pop-1")
    assert popped.exit_code == 0, popped.output
    assert popped.stdout.startswith(f"claimed {message_id} from default/project-a")
    assert "Add /v1/export" in popped.stdout
    again = cluster.run(2, "message", "pop", *scope, "--request-id", "e2e-pop-1", "--json")
    assert json.loads(again.stdout)["message"]["id"] == message_id  # same request id, same message
    empty = cluster.run(1, "message", "pop", *scope)
    assert empty.exit_code == 0 and empty.stdout == ""

    second = cluster.run(
        2,
        "message",
        "send",
        "--to-workspace",
        "default",
        "--to-project",
        "project-b",
        "--from-workspace",
        "default",
        "--from-project",
        "project-a",
        "never mind",
        "--json",
    )
    second_id = json.loads(second.stdout)["message_id"]
    cancelled = cluster.run(
        0,
        "message",
        "cancel",
        "--workspace",
        "default",
        "--project",
        "project-a",
        "--all",
        "--json",
    )
    assert json.loads(cancelled.stdout)["cancelled"] == [second_id]
    late = cluster.run(
        1,
        "message",
        "cancel",
        "--workspace",
        "default",
        "--project",
        "project-a",
        "--id",
        message_id,
    )
    assert late.exit_code in (3, 4), late.output  # already claimed: not cancellable


def test_cluster_status_sees_a_healthy_quorum(cluster: Cluster) -> None:
    result = cluster.run(0, "cluster", "status")
    assert result.exit_code == 0, result.output
    assert "quorum healthy as seen by node1" in result.stdout


def test_cluster_status_shows_each_members_round_trip_as_near(cluster: Cluster) -> None:
    """The peer links time their lone requests (anti-entropy offers alone
    make some within seconds): on loopback each member is well under the
    20 ms that makes a peer far."""
    deadline = time.monotonic() + 15
    while True:
        shown = cluster.run(0, "cluster", "status", "--json")
        assert shown.exit_code == 0, shown.output
        first = json.loads(shown.stdout)["members"][0]["status"]
        trips = {peer: view.get("round_trip_ms") for peer, view in first["peers"].items()}
        if all(isinstance(ms, (int, float)) for ms in trips.values()) or \
                time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(trips) == 2 and all(isinstance(ms, (int, float)) and 0 < ms < 20
                                   for ms in trips.values()), trips
    assert not any(view["far"] for view in first["peers"].values())
    table = cluster.run(0, "cluster", "status").stdout
    assert " RTT " in table.splitlines()[0] and " ms " in table, table


def test_a_refused_pop_of_a_project_that_does_not_exist_leaves_no_mailbox(
        cluster: Cluster) -> None:
    for node in (0, 1, 2):  # whichever member would own it, through whichever node
        refused = cluster.run(node, "message", "pop", "--workspace", "default", "--project",
                              "nosuch-e2e")
        assert refused.exit_code == 3 and "does not exist" in refused.output, refused.output
    shown = cluster.run(0, "cluster", "status", "--json")
    assert shown.exit_code == 0, shown.output
    for member in json.loads(shown.stdout)["members"]:
        assert "mbox:default/nosuch-e2e" not in member["status"]["owned_mailboxes"]
    assert "nosuch-e2e" not in cluster.run(0, "cluster", "status").stdout
