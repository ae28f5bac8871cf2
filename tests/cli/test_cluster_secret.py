"""Every `cluster up` cluster has a secret, kept in its data directory, that
`ai-memory backup` finds by itself (cli/local_secret.py).

The unit tests cover the file (made once, mode 0600, reused, found only for
the cluster's own nodes); the real-cluster test walks `make run`'s path: a
cluster started with no secret, `backup` with no flag from the directory
holding `.data`, a wiped member seeded under the secret, and a restart that
keeps the same secret.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.local_secret import for_url, load_or_create, secret_path
from cli.main import cli
from common.errors import BadRequest


def test_the_secret_is_made_once_private_and_reused(tmp_path: Path) -> None:
    first = load_or_create(tmp_path)
    assert len(first) == 64
    assert stat.S_IMODE(secret_path(tmp_path).stat().st_mode) == 0o600
    assert load_or_create(tmp_path) == first
    os.chmod(secret_path(tmp_path), 0o644)  # copied with a loose umask
    assert load_or_create(tmp_path) == first
    assert stat.S_IMODE(secret_path(tmp_path).stat().st_mode) == 0o600
    secret_path(tmp_path).write_text("\n")
    with pytest.raises(BadRequest, match="is empty"):
        load_or_create(tmp_path)


def test_the_secret_is_found_only_for_the_cluster_s_own_nodes(tmp_path: Path) -> None:
    secret = load_or_create(tmp_path)
    (tmp_path / "cluster.json").write_text(json.dumps({
        "secret_file": str(secret_path(tmp_path)),
        "nodes": {"node1": {"url": "http://127.0.0.1:9077"}}}))
    assert for_url("http://127.0.0.1:9077/", tmp_path) == secret
    assert for_url("http://10.0.0.5:9077", tmp_path) is None
    assert for_url("http://127.0.0.1:9077", tmp_path / "nowhere") is None
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": {"node1": {
        "url": "http://127.0.0.1:9077"}}}))  # a cluster given its secret by hand
    assert for_url("http://127.0.0.1:9077", tmp_path) is None


def test_an_unsigned_backup_says_what_to_pass(tmp_path: Path) -> None:
    class Refuses(BaseHTTPRequestHandler):  # a node with a secret, as it answers unsigned calls
        def do_POST(self) -> None:
            body = b'{"error": "peer request is not signed", "code": "unauthorized"}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = CliRunner().invoke(cli, ["--url", f"http://127.0.0.1:{server.server_port}",
                                          "backup", "--out", str(tmp_path / "b.db")])
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 2
    assert "peer request is not signed" in result.output
    assert "hint: pass the cluster's secret with --secret or set AI_MEMORY_CLUSTER_SECRET" in (
        result.output)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_make_run_s_cluster_backs_up_and_seeds_with_its_own_secret(tmp_path: Path) -> None:
    from tests.cli.test_cluster_failover import Up, inbox, notify, wait

    def local_inbox(url: str) -> set[str]:
        try:
            return inbox(url, "local")
        except (AssertionError, OSError):  # recovering, or not listening yet
            return set()

    data = tmp_path / ".data"  # the conftest runs every test in tmp_path: `make run`'s layout
    up = Up(tmp_path, data=data)
    base = up.base
    run = CliRunner().invoke
    try:
        up.wait_for("Ctrl-C stops every node.")
        secret = secret_path(data).read_text().strip()
        assert stat.S_IMODE(secret_path(data).stat().st_mode) == 0o600
        assert json.loads((data / "cluster.json").read_text())["secret_file"] == str(
            secret_path(data.resolve()))
        n1, n2 = up.urls[0], up.urls[1]
        sent = {f"t{i}" for i in range(5)}
        assert all(notify(n1, t) in (200, 201) for t in sorted(sent))

        took = run(cli, ["--url", n1, "backup", "--out", str(tmp_path / "n1.db")])
        assert took.exit_code == 0, took.output  # no flag: the secret came from .data
        elsewhere = run(cli, ["--url", n1, "backup", "--out", str(tmp_path / "x.db"),
                              "--data", str(tmp_path / "other")])
        assert elsewhere.exit_code == 2, elsewhere.output
        assert "not signed" in elsewhere.output
        assert "hint: pass the cluster's secret with --secret or set " \
               "AI_MEMORY_CLUSTER_SECRET" in elsewhere.output

        # A member that lost its disk is seeded from a peer, the request signed
        # with the same secret, and serves what it never received itself.
        assert "node2: stopped" in up.control("stop", "node2")
        for leftover in data.glob("node2.db*"):
            leftover.unlink()
        assert "node2: running" in up.control("start", "node2")
        wait(lambda: local_inbox(n2) == sent, 60,
             lambda: "node2 was not seeded:\n" + "\n".join(up.lines[-40:]))
        assert any("seed" in line.lower() for line in up.lines if line.startswith("[node2]")), (
            "\n".join(up.lines[-40:]))
    finally:
        up.proc.send_signal(signal.SIGINT)
        code = up.proc.wait(60)
        up._reader.join(10)
        assert up.proc.stdout is not None
        up.proc.stdout.close()
    assert code == 0, "\n".join(up.lines[-60:])
    assert "unauthorized" not in "\n".join(up.lines).lower(), "\n".join(up.lines[-60:])

    again = Up(tmp_path, data=data, base=base)  # the same cluster, started again
    try:
        again.wait_for("Ctrl-C stops every node.")
        assert secret_path(data).read_text().strip() == secret
        took = run(cli, ["--url", again.urls[2], "backup", "--out", str(tmp_path / "n3.db")])
        assert took.exit_code == 0, took.output
    finally:
        again.proc.send_signal(signal.SIGINT)
        code = again.proc.wait(60)
        again._reader.join(10)
        assert again.proc.stdout is not None
        again.proc.stdout.close()
    assert code == 0
    restored = run(cli, ["restore", str(tmp_path / "n3.db"), "--db", str(tmp_path / "r.db")])
    assert restored.exit_code == 0, restored.output
    assert "restored 0 ops" not in restored.output
