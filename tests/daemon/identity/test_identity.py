"""Users, keys and grants on one real node (real SQLite, the real app):
the admin endpoints, resolution through the replicated directory
(``/api/v1/whoami``), revocation and removal taking effect at once, bad
input refused with a JSON error that writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.identity.secrets import check_password, hash_password
from daemon.node import Node
from tests.daemon.rowcounts import row_counts


async def _json(resp: Any, status: int) -> Any:
    body = await resp.json()
    assert resp.status == status, body
    return body


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_key_lifecycle_through_whoami(client: Any, node: Node) -> None:
    await _json(await client.post("/api/v1/admin/users", json={"name": "alice"}), 201)
    made = await _json(await client.post("/api/v1/admin/keys", json={
        "user": "alice", "agent": "alice-bot", "label": "laptop"}), 201)
    key = made["key"]
    assert key.startswith("aim_") and len(key) == 4 + 43 and made["id"].startswith("key_")

    who = await _json(await client.get("/api/v1/whoami", headers=bearer(key)), 200)
    assert who == {"mode": "keys", "user": "alice", "root": False, "agent": "alice-bot",
                   "agent_bound": True, "key_id": made["id"], "owner_user": "alice",
                   "grants": [], "node_mode": "anonymous"}  # a key, on an anonymous node
    same = await _json(await client.get("/api/v1/whoami", headers={"X-API-Key": key}), 200)
    assert same == who

    # the list never shows a secret nor its hash, and notes local last use
    listed = await _json(await client.get("/api/v1/admin/keys"), 200)
    assert listed["count"] == 1 and key not in str(listed) and "hash" not in listed["keys"][0]
    assert listed["keys"][0]["last_used_at"] is not None

    await _json(await client.delete(f"/api/v1/admin/keys/{made['id']}"), 200)
    refused = await _json(await client.get("/api/v1/whoami", headers=bearer(key)), 401)
    assert refused["code"] == "unknown_key"
    # revoking again is idempotent; an unknown id is 404
    await _json(await client.delete(f"/api/v1/admin/keys/{made['id']}"), 200)
    await _json(await client.delete("/api/v1/admin/keys/key_00"), 404)


async def test_grants_show_in_the_principal_and_revoke_narrows(client: Any) -> None:
    await _json(await client.post("/api/v1/admin/users", json={"name": "bob"}), 201)
    key = (await _json(await client.post("/api/v1/admin/keys", json={"user": "bob"}), 201))["key"]
    await _json(await client.post("/api/v1/admin/grants", json={
        "user": "bob", "workspace": "w", "project": "p", "access": "write"}), 201)
    await _json(await client.post("/api/v1/admin/grants", json={
        "user": "bob", "workspace": "v", "access": "read"}), 201)
    who = await _json(await client.get("/api/v1/whoami", headers=bearer(key)), 200)
    assert sorted(who["grants"], key=lambda g: g["workspace"]) == [
        {"workspace": "v", "project": None, "access": "read"},
        {"workspace": "w", "project": "p", "access": "write"}]
    assert who["agent"] is None and who["agent_bound"] is False

    out = await _json(await client.delete("/api/v1/admin/grants", params={
        "user": "bob", "workspace": "w", "project": "p", "access": "write"}), 200)
    assert out["access"] == "read" and out["changed"] is True
    who = await _json(await client.get("/api/v1/whoami", headers=bearer(key)), 200)
    assert {"workspace": "w", "project": "p", "access": "read"} in who["grants"]
    await _json(await client.delete("/api/v1/admin/grants", params={
        "user": "bob", "workspace": "w", "project": "p", "access": "read"}), 200)
    who = await _json(await client.get("/api/v1/whoami", headers=bearer(key)), 200)
    assert who["grants"] == [{"workspace": "v", "project": None, "access": "read"}]
    listed = await _json(await client.get("/api/v1/admin/grants", params={"user": "bob"}), 200)
    assert listed["count"] == 1


async def test_removing_a_user_kills_its_keys_and_the_name(client: Any) -> None:
    await _json(await client.post("/api/v1/admin/users", json={"name": "carol"}), 201)
    keys = [(await _json(await client.post("/api/v1/admin/keys", json={"user": "carol"}),
                         201))["key"] for _ in range(2)]
    for k in keys:
        await _json(await client.get("/api/v1/whoami", headers=bearer(k)), 200)
    out = await _json(await client.delete("/api/v1/admin/users/carol"), 200)
    assert len(out["keys_revoked"]) == 2
    for k in keys:
        await _json(await client.get("/api/v1/whoami", headers=bearer(k)), 401)
    # a removed name is not reused, and new keys for it are refused
    await _json(await client.post("/api/v1/admin/users", json={"name": "carol"}), 409)
    await _json(await client.post("/api/v1/admin/keys", json={"user": "carol"}), 404)
    users = await _json(await client.get("/api/v1/admin/users"), 200)
    assert "carol" not in {u["name"] for u in users["users"]}
    every = await _json(await client.get("/api/v1/admin/users", params={"all": "true"}), 200)
    assert {"name": "carol", "removed": True}.items() <= next(
        u for u in every["users"] if u["name"] == "carol").items()


async def test_root_key_and_owner_user(client: Any, node: Node) -> None:
    await _json(await client.post("/api/v1/admin/users", json={"name": "admin", "root": True}),
                201)
    key = (await _json(await client.post("/api/v1/admin/keys", json={"user": "admin"}),
                       201))["key"]
    who = await _json(await client.get("/api/v1/whoami", headers=bearer(key)), 200)
    assert who["root"] is True and who["owner_user"] == "" and who["user"] == "admin"
    # a root key administers
    await _json(await client.post("/api/v1/admin/users", json={"name": "dave"},
                                  headers=bearer(key)), 201)


async def test_non_root_key_may_not_administer(client: Any) -> None:
    await _json(await client.post("/api/v1/admin/users", json={"name": "eve"}), 201)
    key = (await _json(await client.post("/api/v1/admin/keys", json={"user": "eve"}), 201))["key"]
    for method, path, body in (("POST", "/api/v1/admin/users", {"name": "mallory"}),
                               ("GET", "/api/v1/admin/keys", None),
                               ("POST", "/api/v1/admin/grants", {
                                   "user": "eve", "workspace": "w", "access": "write"})):
        resp = await client.request(method, path, json=body, headers=bearer(key))
        assert (await _json(resp, 403))["code"] == "forbidden"
    bad = await client.get("/api/v1/whoami", headers=bearer("aim_" + "x" * 43))
    assert (await _json(bad, 401))["code"] == "unknown_key"


async def test_passwords(client: Any, node: Node) -> None:
    await _json(await client.post("/api/v1/admin/users", json={
        "name": "fay", "password": "correct horse"}), 201)
    p = await node.identity.verify_password("fay", "correct horse")
    assert p is not None and p.user == "fay" and p.key_id is None
    assert await node.identity.verify_password("fay", "wrong horse") is None
    assert await node.identity.verify_password("nobody", "correct horse") is None
    await _json(await client.post("/api/v1/admin/users/fay/password",
                                  json={"password": "battery staple"}), 200)
    assert await node.identity.verify_password("fay", "correct horse") is None
    assert await node.identity.verify_password("fay", "battery staple") is not None
    # the stored form is scrypt and never the password
    stored = hash_password("pw-12345678")
    assert stored.startswith("scrypt$") and "pw-12345678" not in stored
    assert check_password("pw-12345678", stored) and not check_password("pw-1234567", stored)


BAD_REQUESTS = [
    ("POST", "/api/v1/admin/users", {"name": ""}),
    ("POST", "/api/v1/admin/users", {"name": "a b"}),
    ("POST", "/api/v1/admin/users", {"name": "x" * 65}),
    ("POST", "/api/v1/admin/users", {"name": "ok", "root": "yes"}),
    ("POST", "/api/v1/admin/users", {"name": "ok", "password": "short"}),
    ("POST", "/api/v1/admin/users", ["not", "an", "object"]),
    ("POST", "/api/v1/admin/keys", {"user": "ghost"}),
    ("POST", "/api/v1/admin/keys", {"user": "gina", "agent": "bad agent"}),
    ("POST", "/api/v1/admin/keys", {"user": "gina", "label": "a\x00b"}),
    ("POST", "/api/v1/admin/grants", {"user": "gina", "workspace": "w", "access": "admin"}),
    ("POST", "/api/v1/admin/grants", {"user": "gina", "workspace": "w/x", "access": "read"}),
    ("POST", "/api/v1/admin/grants", {"user": "ghost", "workspace": "w", "access": "read"}),
    ("POST", "/api/v1/admin/users/gina/password", {"password": 12345678}),
    ("POST", "/api/v1/admin/users/ghost/password", {"password": "long enough"}),
    ("DELETE", "/api/v1/admin/users/ghost", None),
    ("DELETE", "/api/v1/admin/keys/not-a-key", None),
    ("DELETE", "/api/v1/admin/grants?user=gina&workspace=w", None),
    ("POST", "/api/v1/admin/users", {"name": "gina"}),
]


@pytest.mark.parametrize(("method", "path", "body"), BAD_REQUESTS)
async def test_bad_input_is_a_json_4xx_and_writes_nothing(
        client: Any, node: Node, tmp_path: Path, method: str, path: str, body: Any) -> None:
    await _json(await client.post("/api/v1/admin/users", json={"name": "gina"}), 201)
    before, vv = row_counts(tmp_path), node.store.version_vector()
    resp = await client.request(method, path, json=body)
    out = await resp.json()
    assert 400 <= resp.status < 500, out
    assert set(out) >= {"error", "code"}
    after = row_counts(tmp_path)
    oplog = "node.db:oplog"  # collected in the background (single member): may only shrink
    assert after.pop(oplog) <= before.pop(oplog)
    assert after == before and node.store.version_vector() == vv


async def test_root_key_given_at_start(tmp_path: Path, aiohttp_client: Any) -> None:
    from dataclasses import replace

    from common.errors import BadRequest
    from daemon.api.app import build_app
    from daemon.identity.secrets import new_secret
    from daemon.settings import load_settings
    from daemon.wiring import build_node
    from tests.daemon.conftest import make_settings

    secret = new_secret()
    key_file = tmp_path / "root.key"
    key_file.write_text(secret + "\n")
    conf = tmp_path / "node.toml"
    conf.write_text(f'[auth]\nbootstrap_root_key_file = "{key_file}"\nroot_username = "ops"\n')
    loaded = load_settings({}, env={}, config_path=conf)
    assert loaded.auth.bootstrap_root_key == secret and secret not in repr(loaded)
    with pytest.raises(BadRequest):
        load_settings({}, env={"AI_MEMORY_ROOT_KEY": "aim_short"})

    base = make_settings(tmp_path / "node.db")
    settings = replace(base, auth=loaded.auth)
    for _ in range(2):  # the second start finds the records and writes nothing
        n = await build_node(settings)
        await n.start()
        try:
            client = await aiohttp_client(build_app(n))
            who = await _json(await client.get("/api/v1/whoami", headers=bearer(secret)), 200)
            assert who["root"] is True and who["user"] == "ops" and who["owner_user"] == "ops"
            assert n.store.max_seq("node1") == 2
            await client.close()
        finally:
            await n.stop()


async def test_a_static_key_is_root_as_bearer_or_x_api_key(tmp_path: Path,
                                                           aiohttp_client: Any) -> None:
    from dataclasses import replace

    from daemon.api.app import build_app
    from daemon.settings import AuthSettings
    from daemon.wiring import build_node
    from tests.daemon.conftest import make_settings

    settings = replace(make_settings(tmp_path / "node.db"),
                       auth=AuthSettings(api_keys={"static-k": "ops-bot"}))
    n = await build_node(settings)
    await n.start()
    try:
        client = await aiohttp_client(build_app(n))
        for headers in ({"Authorization": "Bearer static-k"}, {"X-API-Key": "static-k"}):
            who = await _json(await client.get("/api/v1/whoami", headers=headers), 200)
            assert who["root"] is True and who["agent"] == "ops-bot", headers
            await _json(await client.get("/api/v1/admin/users", headers=headers), 200)
        await _json(await client.get("/api/v1/whoami", headers=bearer("nope")), 401)
        await client.close()
    finally:
        await n.stop()


async def test_whoami_names_the_mode_the_node_runs_in(tmp_path: Path,
                                                      aiohttp_client: Any) -> None:
    """``mode`` is how the caller was identified; ``node_mode`` is the node's own."""
    from dataclasses import replace

    from daemon.api.app import build_app
    from daemon.settings import AuthSettings
    from daemon.wiring import build_node
    from tests.daemon.conftest import make_settings

    for mode in ("anonymous", "keys"):
        settings = replace(make_settings(tmp_path / f"{mode}.db"),
                           auth=AuthSettings(mode=mode, api_keys={"static-k": "ops-bot"}))
        n = await build_node(settings)
        await n.start()
        try:
            client = await aiohttp_client(build_app(n))
            who = await _json(await client.get("/api/v1/whoami", headers=bearer("static-k")), 200)
            assert who["node_mode"] == mode
            if mode == "anonymous":
                nobody = await _json(await client.get("/api/v1/whoami"), 200)
                assert (nobody["mode"], nobody["node_mode"]) == ("anonymous", "anonymous")
            await client.close()
        finally:
            await n.stop()
