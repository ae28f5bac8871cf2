"""Users and keys across three real daemons (real processes over loopback,
real SQLite): a key made through one member works on every member at once;
a revocation or a user removal acknowledged through one member is refused
by all, including a member that was down or cut off when it happened."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import ROOT, Cluster
from tests.cluster.proxy import REFUSE

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def ok(result: tuple[int, Any], status: int = 200) -> Any:
    code, body = result
    assert code == status, body
    return body


def make_key(c: Cluster, nid: str, user: str, **extra: Any) -> dict[str, Any]:
    return ok(c.call(nid, "POST", "/api/v1/admin/keys", {"user": user, **extra}), 201)  # type: ignore[no-any-return]


def whoami(c: Cluster, nid: str, key: str) -> tuple[int, Any]:
    return c.call(nid, "GET", "/api/v1/whoami", headers=bearer(key))


def test_keys_resolve_everywhere_and_revocations_are_refused_everywhere(cluster: Cluster) -> None:
    c = cluster
    ok(c.call("node1", "POST", "/api/v1/admin/users", {"name": "alice"}), 201)
    made = make_key(c, "node1", "alice", agent="alice-bot")
    # made through node 1, at once on node 3 (and 2)
    for nid in ("node3", "node2"):
        who = ok(whoami(c, nid, made["key"]))
        assert who["user"] == "alice" and who["agent"] == "alice-bot"
        assert who["key_id"] == made["id"]

    # revoked through node 2: refused by all three as soon as it is acknowledged;
    # with every member up that is once each confirmed it, well within the lease
    started = time.monotonic()
    ok(c.call("node2", "DELETE", f"/api/v1/admin/keys/{made['id']}"))
    assert time.monotonic() - started < 1.5
    for nid in c.ids:
        assert whoami(c, nid, made["key"])[0] == 401, nid

    # a user's removal kills its keys on every node
    k2 = make_key(c, "node3", "alice")
    for nid in c.ids:
        ok(whoami(c, nid, k2["key"]))
    ok(c.call("node1", "DELETE", "/api/v1/admin/users/alice"))
    for nid in c.ids:
        assert whoami(c, nid, k2["key"])[0] == 401, nid


def test_a_member_down_during_the_revocation_refuses_the_key_once_back(
        cluster: Cluster) -> None:
    c = cluster
    ok(c.call("node1", "POST", "/api/v1/admin/users", {"name": "bob"}), 201)
    made = make_key(c, "node1", "bob")
    ok(whoami(c, "node3", made["key"]))  # node 3 holds it, cached
    c.kill9("node3")
    ok(c.call("node2", "DELETE", f"/api/v1/admin/keys/{made['id']}"))
    # back, but still cut off from the others: it holds the key unrevoked,
    # and refuses to trust that copy until it has heard from a quorum
    c.net.isolate("node3", REFUSE)
    try:
        c.restart("node3")
        code, body = whoami(c, "node3", made["key"])
        assert code == 503 and body["code"] == "identity_unconfirmed", body
    finally:
        c.net.heal()
    # its first keyed request after that reads a quorum and refuses the key
    assert _settled_status(c, "node3", made["key"]) == 401
    c.kill9("node3")
    c.restart("node3")  # and a plain restart: same answer at once
    assert whoami(c, "node3", made["key"])[0] == 401


def _settled_status(c: Cluster, nid: str, key: str, timeout: float = 10.0) -> int:
    """The status once the node can reach its peers again (503 until then)."""
    deadline = time.monotonic() + timeout
    while True:
        code, _ = whoami(c, nid, key)
        if code != 503 or time.monotonic() > deadline:
            return code
        time.sleep(0.2)


def test_a_member_cut_off_during_the_revocation_stops_accepting_the_key(
        cluster: Cluster) -> None:
    c = cluster
    ok(c.call("node1", "POST", "/api/v1/admin/users", {"name": "carl"}), 201)
    made = make_key(c, "node1", "carl")
    ok(whoami(c, "node3", made["key"]))  # warm on node 3
    c.net.isolate("node3", REFUSE)
    try:
        started = time.monotonic()
        ok(c.call("node1", "DELETE", f"/api/v1/admin/keys/{made['id']}"))
        waited = time.monotonic() - started
        # node 3 never heard of the revocation, yet no longer accepts the key:
        # its lease ran out while the revocation waited, and it cannot renew it
        code, body = whoami(c, "node3", made["key"])
        assert code == 503 and body["code"] == "identity_unconfirmed", body
        assert waited >= 1.5  # the revocation outwaited the lease
    finally:
        c.net.heal()
    # healed: node 3 reads a quorum, learns of the revocation, refuses
    assert _settled_status(c, "node3", made["key"]) == 401


def _cli(*args: str, url: str | None = None, key: str | None = None,
         stdin: str | None = None) -> str:
    env_args = ["--url", url] if url else []
    if key:
        env_args += ["--key", key]
    proc = subprocess.run([sys.executable, "-m", "cli", *env_args, *args], cwd=ROOT,
                          capture_output=True, text=True, input=stdin, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_bootstrap_with_db_then_cli_round_trips_on_every_node(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    try:
        out = _cli("user", "add", "admin", "--root", "--db", str(c.procs["node1"].db),
                   "--node-id", "node1", "--json")
        boot = json.loads(out)
        root = boot["key"]
        assert root.startswith("aim_") and boot["node_id"] == "node1"
        c.start()
        ok(whoami(c, "node1", root))
        # A member that asks after node1's root user reached another member
        # is seeded (a peer holds data) and takes writes once it recovered.
        for nid in c.ids:
            c.wait_serving(nid)
        c.wait_converged()  # the bootstrap ops reach the others by anti-entropy
        for nid in c.ids:
            who = ok(whoami(c, nid, root))
            assert who["root"] is True and who["user"] == "admin", nid

        u1, u2, u3 = (c.url(n) for n in c.ids)
        _cli("user", "add", "dana", url=u2, key=root)
        made = json.loads(_cli("key", "create", "--user", "dana", "--label", "ci", "--json",
                               url=u3, key=root))
        listed = json.loads(_cli("key", "list", "--json", url=u1, key=root))
        assert made["id"] in {k["id"] for k in listed["keys"]}
        assert made["key"] not in json.dumps(listed)
        _cli("grant", "--user", "dana", "--workspace", "w", "--project", "p", "--write",
             url=u1, key=root)
        danas = json.loads(_cli("key", "list", "--json", "--user", "dana", url=u2, key=root))
        assert danas["count"] == 1
        who = ok(whoami(c, "node2", made["key"]))
        assert who["grants"] == [{"workspace": "w", "project": "p", "access": "write"}]
        _cli("revoke", "--user", "dana", "--workspace", "w", "--project", "p", "--write",
             url=u3, key=root)
        who = ok(whoami(c, "node1", made["key"]))
        assert who["grants"] == [{"workspace": "w", "project": "p", "access": "read"}]
        _cli("user", "passwd", "dana", "--stdin", url=u1, key=root, stdin="long password\n")
        users = json.loads(_cli("user", "list", "--json", url=u3, key=root))
        dana = next(u for u in users["users"] if u["name"] == "dana")
        assert dana["has_password"] is True
        # a non-root key may not administer: the CLI exits with the 403
        proc = subprocess.run([sys.executable, "-m", "cli", "--url", u1, "--key", made["key"],
                               "user", "list"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and "root" in proc.stderr
        _cli("key", "revoke", made["id"], url=u2, key=root)
        for nid in c.ids:
            assert whoami(c, nid, made["key"])[0] == 401
        _cli("user", "remove", "dana", url=u1, key=root)
        users = json.loads(_cli("user", "list", "--json", url=u2, key=root))
        assert "dana" not in {u["name"] for u in users["users"]}
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


def test_root_key_from_the_environment_is_idempotent(tmp_path: Path) -> None:
    root = _cli("key", "generate").strip()
    c = Cluster(tmp_path)
    for p in c.procs.values():
        p.extra_env["AI_MEMORY_ROOT_KEY"] = root
    try:
        c.start()
        for nid in c.ids:
            assert ok(whoami(c, nid, root))["root"] is True
        c.wait_converged()
        keys = ok(c.call("node2", "GET", "/api/v1/admin/keys", headers=bearer(root)))
        assert keys["count"] == 1  # the same secret made the same record on every node
        c.kill9("node1")
        c.restart("node1")
        ok(whoami(c, "node1", root))
        keys = ok(c.call("node1", "GET", "/api/v1/admin/keys", headers=bearer(root)))
        assert keys["count"] == 1
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()
