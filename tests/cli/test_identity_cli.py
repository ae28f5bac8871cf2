"""``ai-memory user|key|grant|revoke`` against the stub daemon (what is sent,
what is printed), and ``user add --root --db`` against a real database file."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner, Result

from cli.main import cli
from daemon.identity.secrets import hash_secret
from store import identity as I
from store.db import Store
from tests.cli.stub import StubDaemon

Run = Callable[..., Result]


def test_key_goes_as_bearer_from_option_or_environment(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/admin/users", {"users": [], "count": 0})
    assert run("--key", "aim_opt", "user", "list").exit_code == 0
    assert stub.last().headers["Authorization"] == "Bearer aim_opt"
    assert run("user", "list", "--json", env={"AI_MEMORY_KEY": "aim_env"}).exit_code == 0
    assert stub.last().headers["Authorization"] == "Bearer aim_env"


def test_key_takes_the_place_of_api_key_when_both_are_given(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/admin/users", {"users": [], "count": 0})
    assert run("--api-key", "k_old", "--key", "aim_new", "user", "list").exit_code == 0
    assert stub.last().headers["Authorization"] == "Bearer aim_new"
    assert "X-API-Key" not in stub.last().headers
    result = run("--key", "aim_new", "user", "list", env={"AI_MEMORY_API_KEY": "k_env"})
    assert result.exit_code == 0
    assert "X-API-Key" not in stub.last().headers


def test_key_create_prints_the_secret_once_on_stdout(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/admin/keys", {"id": "key_ab", "key": "aim_SECRET",
                                               "user": "u"}, status=201)
    result = run("key", "create", "--user", "u", "--agent", "bot", "--label", "ci")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "aim_SECRET" and "key_ab" in result.stderr
    assert stub.last().body == {"user": "u", "agent": "bot", "label": "ci"}


def test_grant_and_revoke_send_what_they_say(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/admin/grants", {"access": "write"}, status=201)
    stub.reply("DELETE", "/api/v1/admin/grants", {"access": "read", "changed": True})
    assert run("grant", "--user", "u", "--workspace", "w", "--write").exit_code == 0
    assert stub.last().body == {"user": "u", "workspace": "w", "access": "write"}
    result = run("revoke", "--user", "u", "--workspace", "w", "--project", "p", "--write")
    assert result.exit_code == 0 and "now read" in result.output
    assert stub.last().query == {"user": "u", "workspace": "w", "project": "p",
                                 "access": "write"}
    assert run("grant", "--user", "u", "--workspace", "w").exit_code == 2  # neither flag


def test_passwd_prompts_twice_and_key_revoke(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/admin/users/u/password", {"password_set": True})
    stub.reply("DELETE", "/api/v1/admin/keys/key_ab", {"id": "key_ab", "revoked": True})
    result = run("user", "passwd", "u", input="long secret\nlong secret\n")
    assert result.exit_code == 0, result.output
    assert stub.last().body == {"password": "long secret"}
    assert run("key", "revoke", "key_ab").exit_code == 0
    assert stub.last().method == "DELETE"


def test_whoami_prints_the_principal(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/whoami", {
        "mode": "keys", "user": "alice", "root": False, "agent": "alice-bot",
        "agent_bound": True, "key_id": "key_ab", "owner_user": "alice",
        "grants": [{"workspace": "acme", "project": None, "access": "read"}]})
    result = run("--key", "aim_x", "whoami")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [  # a node without node_mode: the caller's mode
        "alice, agent alice-bot (bound to the key), key key_ab, keys mode", "  read on acme/*"]
    assert stub.last().headers["Authorization"] == "Bearer aim_x"


def test_whoami_says_the_nodes_mode_not_the_callers(stub: StubDaemon, run: Run) -> None:
    anonymous = {"mode": "anonymous", "user": None, "root": False, "agent": "bob",
                 "agent_bound": False, "key_id": None, "owner_user": "", "grants": [],
                 "node_mode": "anonymous"}
    keyed = {"mode": "keys", "user": "alice", "root": False, "agent": "alice-bot",
             "agent_bound": True, "key_id": "key_ab", "owner_user": "alice", "grants": [],
             "node_mode": "anonymous"}
    stub.reply("GET", "/api/v1/whoami", anonymous)
    stub.reply("GET", "/api/v1/whoami", keyed)
    stub.reply("GET", "/api/v1/whoami", {**keyed, "node_mode": "keys"})
    assert run("--agent-id", "bob", "whoami").output == (
        "(anonymous), agent bob; the node runs in anonymous mode: no key, X-Agent-Id names the "
        "agent and every project is open\n")
    assert run("--key", "aim_x", "whoami").output == (
        "alice, agent alice-bot (bound to the key), key key_ab; the node runs in anonymous "
        "mode, but a key is still checked: its grants apply\n")
    assert run("--key", "aim_x", "whoami").output == (
        "alice, agent alice-bot (bound to the key), key key_ab; the node runs in keys mode\n")


def test_bootstrap_into_a_database_file(tmp_path: Path) -> None:
    db = tmp_path / "node1.db"
    args = ["user", "add", "admin", "--root", "--db", str(db), "--node-id", "node1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip()
    assert secret.startswith("aim_")

    # while a node holds the file open, any bootstrap is refused
    held = sqlite3.connect(db)
    held.execute("SELECT count(*) FROM users").fetchall()
    try:
        again = CliRunner().invoke(cli, args)
        assert again.exit_code == 4 and "open in another process" in again.output
    finally:
        held.close()
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 4 and "already exists" in again.output
    # without --root, --db is refused
    assert CliRunner().invoke(cli, ["user", "add", "x", "--db", str(db)]).exit_code == 2

    async def check() -> None:
        store = await Store.open(db, "node1")
        try:
            assert store.created  # the node's first open treats the file as new
            user = await I.user(store.reads, "admin")
            assert user is not None and user["root"]
            [key] = await I.keys_by_hash(store.reads, hash_secret(secret))
            assert key["user"] == "admin" and store.max_seq("node1") == 2
        finally:
            await store.close()
        store = await Store.open(db, "node1")
        try:
            assert not store.created  # only the first open
        finally:
            await store.close()
    asyncio.run(check())
