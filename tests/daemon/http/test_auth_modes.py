"""Choosing the auth mode: flags, environment, TOML, the legacy switch, and
the refusal to serve anonymous mode off loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import BadRequest
from daemon.identity.memory_directory import parse_grant, static_directory
from daemon.settings import check_exposure, is_loopback_host, load_settings
from tests.cluster.harness import ROOT, free_port


def toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def test_anonymous_is_the_default() -> None:
    assert load_settings({}, env={}).auth.mode == "anonymous"


def test_mode_from_flag_env_and_toml(tmp_path: Path) -> None:
    conf = toml(tmp_path, '[auth]\nmode = "keys"\n')
    assert load_settings({"config": str(conf)}, env={}).auth.mode == "keys"
    assert load_settings({}, env={"AI_MEMORY_AUTH": "keys"}).auth.mode == "keys"
    assert load_settings({"auth": "keys"}, env={"AI_MEMORY_AUTH": "anonymous"}).auth.mode == "keys"
    assert load_settings({"auth": "anonymous", "config": str(conf)}, env={}).auth.mode == "anonymous"
    with pytest.raises(BadRequest):
        load_settings({"auth": "open"}, env={})


def test_require_api_key_means_keys_mode(tmp_path: Path) -> None:
    conf = toml(tmp_path, '[auth]\nrequire_api_key = true\napi_keys = { "k1" = "alice" }\n')
    auth = load_settings({"config": str(conf)}, env={}).auth
    assert auth.mode == "keys" and auth.api_keys == {"k1": "alice"}
    with pytest.raises(BadRequest, match="require_api_key"):
        load_settings({"config": str(conf), "auth": "anonymous"}, env={})


async def test_static_keys_from_toml(tmp_path: Path) -> None:
    conf = toml(tmp_path, """
[auth]
mode = "keys"
root_username = "ops"
api_keys = { "legacy" = "alice" }

[[auth.static_keys]]
secret = "s-bob"
user = "bob"
agent = "bob-agent"
grants = ["ws/alpha:write", "ws/*:read"]
""")
    auth = load_settings({"config": str(conf)}, env={}).auth
    directory = static_directory(auth)
    legacy = await directory.resolve("legacy")
    assert legacy is not None and legacy.root and legacy.agent == "alice" and legacy.agent_bound
    assert legacy.owner_user == "ops"
    bob = await directory.resolve("s-bob")
    assert bob is not None and not bob.root and bob.user == "bob" and bob.owner_user == "bob"
    assert bob.agent == "bob-agent" and bob.agent_bound
    assert bob.may("ws", "alpha", "write") and bob.may("ws", "beta", "read")
    assert not bob.may("ws", "beta", "write") and not bob.may("other", "alpha", "read")
    assert await directory.resolve("s-bo") is None and await directory.resolve("") is None


def test_bad_static_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="static_keys"):
        load_settings({"config": str(toml(tmp_path, '[[auth.static_keys]]\nuser = "x"\n'))},
                      env={})
    for bad in ("ws:write", "ws/p:admin", "/p:read", "ws/:read"):
        with pytest.raises(BadRequest):
            parse_grant(bad)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False),
    ("node1.example.com", False),
])
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_anonymous_mode_off_loopback_is_refused() -> None:
    open_ = load_settings({"host": "0.0.0.0"}, env={})
    with pytest.raises(BadRequest, match="--insecure-anonymous"):
        check_exposure(open_)
    check_exposure(load_settings({"host": "0.0.0.0", "insecure_anonymous": True}, env={}))
    check_exposure(load_settings({"host": "0.0.0.0"}, env={"AI_MEMORY_INSECURE_ANONYMOUS": "1"}))
    check_exposure(load_settings({"host": "0.0.0.0", "auth": "keys"}, env={}))
    check_exposure(load_settings({"host": "127.0.0.1"}, env={}))


def test_keys_mode_with_peers_needs_a_cluster_secret() -> None:
    flags = {"auth": "keys", "quorum_peers": "http://127.0.0.1:9078"}
    with pytest.raises(BadRequest, match="cluster secret"):
        check_exposure(load_settings(flags, env={}))
    check_exposure(load_settings({**flags, "cluster_secret": "s"}, env={}))


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "serve", "--port", str(free_port()), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_serve_refuses_anonymous_on_all_addresses(tmp_path: Path) -> None:
    done = _serve("--host", "0.0.0.0", "--db", str(tmp_path / "n.db"))
    assert done.returncode == 2
    assert "refusing to serve anonymous mode on 0.0.0.0" in done.stderr
    assert "--insecure-anonymous" in done.stderr
    assert not (tmp_path / "n.db").exists()  # refused before anything was opened
