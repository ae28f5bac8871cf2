"""`cluster status` over stub members and `cluster init` config files."""

from __future__ import annotations

import json
import stat
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.cluster_status import member_addresses
from cli.main import cli
from daemon.settings import check_exposure, load_settings
from tests.cli.stub import StubDaemon
from tests.cluster.harness import free_port

Run = Callable[..., Result]


@pytest.fixture
def second() -> Iterator[StubDaemon]:
    daemon = StubDaemon().start()
    yield daemon
    daemon.stop()


def dead_url() -> str:
    """A port nothing listens on, below the ephemeral range: a connection to a
    closed port in that range may be given it as its own source port and
    connect to itself."""
    return f"http://127.0.0.1:{free_port()}"


def status_of(
    node_id: str,
    members: list[dict[str, str]],
    vv: dict[str, int],
    healthy: bool,
    peers: dict[str, object] | None = None,
    owned: dict[str, int] | None = None,
) -> dict:
    return {
        "node_id": node_id,
        "version": "0.1.0",
        "members": members,
        "write_quorum": 2,
        "vv": vv,
        "peers": peers or {},
        "owned_mailboxes": owned or {},
        "promises": {},
        "oplog_ops": sum(vv.values()),
        "quorum_healthy": healthy,
    }


def test_status_asks_every_member_and_shows_the_unreachable(
    stub: StubDaemon, second: StubDaemon, run: Run
) -> None:
    down = dead_url()
    members = [
        {"node_id": "node1", "url": stub.url},
        {"node_id": "node2", "url": second.url},
        {"node_id": "node3", "url": down},
    ]
    peers = {
        "node2": {
            "reachable": True,
            "last_contact_ms_ago": 120,
            "vv": {"node1": 10, "node2": 5},
            "lag_ops": 0,
        },
        "node3": {
            "reachable": False,
            "last_contact_ms_ago": 9000,
            "vv": {"node1": 4},
            "lag_ops": 11,
        },
    }
    stub.reply(
        "GET",
        "/api/v1/cluster/status",
        status_of(
            "node1", members, {"node1": 10, "node2": 5}, True, peers, {"default/project-b": 3}
        ),
    )
    second.reply(
        "GET", "/api/v1/cluster/status", status_of("node2", members, {"node1": 8, "node2": 5}, True)
    )
    result = run("cluster", "status")
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:4]}
    assert rows["node1"].split()[2:7] == ["yes", "0.1.0", "15", "0", "self"]
    assert "default/project-b@3" in rows["node1"]
    assert rows["node2"].split()[2:8] == ["yes", "0.1.0", "13", "2", "0.1s", "ago"]
    # The column says it in a word; the whole error is printed under the table.
    assert rows["node3"].split()[2:4] == ["no", "(refused)"]
    assert "cannot connect" not in rows["node3"]
    assert f"node3 ({down}): cannot connect to" in result.stdout
    assert "9.0s ago" in rows["node3"] and " 11 " in rows["node3"]
    assert "2/3 members answered" in result.stdout


def test_status_exit_6_when_quorum_unhealthy_and_json(stub: StubDaemon, run: Run) -> None:
    members = [{"node_id": "node1", "url": stub.url}, {"node_id": "node2", "url": dead_url()}]
    stub.reply("GET", "/api/v1/cluster/status", status_of("node1", members, {"node1": 1}, False))
    result = run("cluster", "status", "--json")
    assert result.exit_code == 6
    report = json.loads(result.stdout)
    assert report["quorum_healthy"] is False
    assert [m["reachable"] for m in report["members"]] == [True, False]


def test_status_of_an_unreachable_node_exits_7() -> None:
    result = CliRunner().invoke(cli, ["--url", dead_url(), "cluster", "status"])
    assert result.exit_code == 7


def test_member_list_shapes_are_all_understood() -> None:
    status = {
        "node_id": "a",
        "members": ["a", "b=http://h:2/", "http://h:3", {"id": "d", "url": "http://h:4"}, "e"],
    }
    assert member_addresses(status, "http://h:1") == [
        ("a", "http://h:1"),
        ("b", "http://h:2"),
        ("http://h:3", "http://h:3"),
        ("d", "http://h:4"),
        ("e", None),
    ]


def test_init_writes_one_loadable_config_per_node_with_one_secret(tmp_path: Path) -> None:
    out = tmp_path / "etc"
    result = CliRunner().invoke(
        cli,
        [
            "cluster",
            "init",
            "--nodes",
            "3",
            "--base-port",
            "9100",
            "--out",
            str(out),
            "--data",
            str(tmp_path / "lib"),
        ],
    )
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("*.toml"))
    assert [f.name for f in files] == ["node1.toml", "node2.toml", "node3.toml"]
    secrets = set()
    for i, path in enumerate(files, start=1):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        secrets.add(tomllib.loads(path.read_text())["cluster"]["secret"])
        settings = load_settings(env={}, config_path=path)
        assert settings.cluster.node_id == f"node{i}"
        assert settings.server.port == 9099 + i
        assert settings.store.db_path == str(tmp_path / "lib" / f"node{i}" / "ai-memory.db")
        assert {p.node_id for p in settings.cluster.peers} == {"node1", "node2", "node3"} - {
            f"node{i}"
        }
        assert settings.cluster.w == 2
    assert len(secrets) == 1 and len(secrets.pop()) == 64


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    args = ["cluster", "init", "--nodes", "1", "--out", str(tmp_path)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    first = (tmp_path / "node1.toml").read_text()
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 4
    assert "--force" in refused.stderr
    assert CliRunner().invoke(cli, [*args, "--force"]).exit_code == 0
    assert (tmp_path / "node1.toml").read_text() != first  # a new secret


def test_init_per_node_hosts(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "cluster",
            "init",
            "--nodes",
            "2",
            "--out",
            str(tmp_path),
            "--host",
            "127.0.0.2",
            "--host",
            "127.0.0.3",
        ],
    )
    assert result.exit_code == 0, result.output
    node1 = tomllib.loads((tmp_path / "node1.toml").read_text())
    assert node1["server"]["host"] == "127.0.0.2"
    assert node1["cluster"]["peers"] == ["node2=http://127.0.0.3:9078"]
    bad = CliRunner().invoke(
        cli,
        [
            "cluster",
            "init",
            "--nodes",
            "3",
            "--out",
            str(tmp_path / "x"),
            "--host",
            "a",
            "--host",
            "b",
        ],
    )
    assert bad.exit_code == 2


def test_status_from_a_daemon_listing_ids_with_peer_urls(
    stub: StubDaemon, second: StubDaemon, run: Run
) -> None:
    # Members as bare ids, URLs under peers[id].url, health as reachable >= write_quorum.
    first = {
        "node_id": "node1",
        "version": "0.1.0",
        "members": ["node1", "node2"],
        "write_quorum": 2,
        "reachable": 2,
        "vv": {"node1": 3},
        "peers": {
            "node2": {
                "alive": True,
                "last_heard_ms_ago": 250,
                "vv": {"node1": 3},
                "lag_ops": 0,
                "url": second.url,
            }
        },
        "owned_mailboxes": {},
    }
    stub.reply("GET", "/api/v1/cluster/status", first)
    second.reply(
        "GET", "/api/v1/cluster/status", {**first, "node_id": "node2", "reachable": 1, "peers": {}}
    )
    result = run("cluster", "status")
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:3]}
    assert rows["node2"][1] == second.url
    assert rows["node2"][4:9] == ["3", "0", "0.2s", "ago", "-"]
    assert rows["node1"][-1] == "healthy" and rows["node2"][-2:] == ["NOT", "healthy"]


def test_init_picks_keys_mode_off_loopback(tmp_path: Path) -> None:
    for hosts, mode in ((["127.0.0.1"], "anonymous"), (["10.1.0.11", "10.1.0.12"], "keys")):
        out = tmp_path / mode
        args = ["cluster", "init", "--nodes", "2", "--out", str(out)]
        for host in hosts:
            args += ["--host", host]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        settings = load_settings(env={}, config_path=out / "node1.toml")
        assert settings.auth.mode == mode
        check_exposure(settings)  # either way the node would start


def test_status_sends_the_key_to_every_member(stub: StubDaemon, second: StubDaemon,
                                               run: Run) -> None:
    """In keys mode every member's status needs the key (deploy/README.md's
    `ai-memory --url ... cluster status` on a cluster from `cluster init`)."""
    members = [{"node_id": "node1", "url": stub.url}, {"node_id": "node2", "url": second.url}]
    stub.reply("GET", "/api/v1/cluster/status", status_of("node1", members, {}, True))
    second.reply("GET", "/api/v1/cluster/status", status_of("node2", members, {}, True))
    result = run("--key", "aim_root", "cluster", "status")
    assert result.exit_code == 0, result.output
    for daemon in (stub, second):
        assert daemon.last("GET", "/api/v1/cluster/status").headers["Authorization"] == \
            "Bearer aim_root"
