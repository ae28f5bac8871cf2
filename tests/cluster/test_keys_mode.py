"""A three-node cluster in keys mode (real processes, signed peers): the
policy is decided where the request enters, and mail sent through one node
with a key is popped through another with a key, while a key without the
grant is refused on every node and nothing answers without a key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster
from tests.daemon.authz_fixtures import ALPHA, BETA, ROOT_KEY, WS, key_of, toml_keys

pytestmark = pytest.mark.slow


@pytest.fixture
def keyed_cluster(tmp_path: Path) -> Iterator[Cluster]:
    conf = tmp_path / "auth.toml"
    conf.write_text(toml_keys())
    c = Cluster(tmp_path)
    for proc in c.procs.values():
        proc.extra_env["AI_MEMORY_CONFIG"] = str(conf)
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_keys_mode_across_the_cluster(keyed_cluster: Cluster) -> None:
    c = keyed_cluster
    for nid in c.ids:
        assert c.call(nid, "GET", "/api/v1/health")[0] == 200
        assert c.call(nid, "GET", "/api/v1/cluster/status")[0] == 401
        code, status = c.call(nid, "GET", "/api/v1/cluster/status", headers=bearer(ROOT_KEY))
        assert code == 200 and len(status["peers"]) == 2
    for project, harness in ((ALPHA, "kimi"), (BETA, "claude-code")):
        code, body = c.call("node1", "POST", "/api/v1/sessions",
                            {"workspace": WS, "project": project, "harness": harness},
                            headers=bearer(ROOT_KEY))
        assert code == 201, body
    send = {"to_workspace": WS, "to_project": BETA, "from_workspace": WS,
            "from_project": ALPHA, "body": "across the cluster"}
    for nid in c.ids:  # a key without write on the recipient is refused everywhere
        code, body = c.call(nid, "POST", "/api/v1/messages", send,
                            headers=bearer(key_of("alpha-write")))
        assert code == 403 and body["project"] == BETA, body
    code, sent = c.call("node1", "POST", "/api/v1/messages", send,
                        headers=bearer(key_of("both-write")))
    assert code == 201, sent
    pop = {"workspace": WS, "project": BETA}
    code, body = c.call("node3", "POST", "/api/v1/messages/pop", pop,
                        headers=bearer(key_of("alpha-write")))
    assert code == 403, body
    code, popped = c.call("node3", "POST", "/api/v1/messages/pop", pop,
                          headers=bearer(key_of("beta-write")))
    assert code == 200 and popped["message"]["id"] == sent["message_id"], popped
    assert popped["message"]["from_owner_user"] == "user-both-write"
    # beta's writer may not read alpha: the sender's name is hidden from it
    assert popped["message"]["from_project_id"] is None and popped["message"]["hidden"]


def test_the_cli_with_a_key(keyed_cluster: Cluster, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.cluster.harness import ROOT

    c = keyed_cluster
    for project, harness in ((ALPHA, "kimi"), (BETA, "claude-code")):
        assert c.call("node2", "POST", "/api/v1/sessions",
                      {"workspace": WS, "project": project, "harness": harness},
                      headers=bearer(ROOT_KEY))[0] == 201

    def cli(key: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
        if key:
            env["AI_MEMORY_API_KEY"] = key
        return subprocess.run([sys.executable, "-m", "cli", "--url", c.url("node2"), *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)

    send = ("message", "send", "--to-workspace", WS, "--to-project", BETA, "--from-workspace",
            WS, "--from-project", ALPHA, "from the terminal")
    refused = cli(key_of("alpha-read"), *send)
    assert refused.returncode == 2 and "needs write" in refused.stderr, refused
    assert cli(None, *send).returncode == 2
    done = cli(key_of("both-write"), *send)
    assert done.returncode == 0, done.stderr
    listed = cli(key_of("both-read"), "message", "list", "--workspace", WS, "--project", BETA,
                 "--json")
    assert listed.returncode == 0, listed.stderr
    assert "from the terminal" in listed.stdout


def test_a_backup_with_a_root_key_from_a_node_without_a_secret(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.cluster.harness import ROOT
    from tests.daemon.procdaemon import daemon_process

    (tmp_path / "node.toml").write_text(toml_keys())
    with daemon_process(tmp_path / "data", "--config", str(tmp_path / "node.toml")) as node:
        def backup(key: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "cli", "--url", node.url, "--api-key", key, "backup",
                 "--out", str(tmp_path / f"{key}.db")],
                cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                capture_output=True, text=True, timeout=60)

        refused = backup(key_of("workspace-write"))
        assert refused.returncode == 2 and "root" in refused.stderr, refused
        done = backup(ROOT_KEY)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / f"{ROOT_KEY}.db").stat().st_size > 0
