"""Administering users, API keys and project grants.

Every change is a quorum write of one or more identity ops through the
node's normal write path (:meth:`daemon.node.Node.write`), so it replicates,
is repaired by anti-entropy and survives like any other record. Each action
first reads a quorum of the identity records (the read barrier on
``ident:dir``), so it decides on what the cluster holds, not on a stale
local copy: "already exists", "unknown user" and "already revoked" are
cluster-wide answers.

Actions that take rights away (remove a user, revoke a key, revoke or
narrow a grant) answer only once they are refused on every member
(:func:`refused_everywhere`): every peer confirms it holds the ops (a pull
of ``ident:dir`` below their seqs, which a peer answers only after its
directory applied what it shows; a peer outside the write quorum that
lacks them is asked again after ``limits.identity_confirm_retry_secs``,
since their replication may still be on its way), or else the directory
lease of the members that did not confirm has run out.

A removed user's name is not reused (removal is a tombstone); a removed
user's keys are revoked with it. Secrets exist only in the answer to
``create_key``; lists show ids, labels and hashes' owners, never a secret.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from common import limits
from common.errors import Conflict, NotFound
from common.ops import APIKEY_PUT, IDENT_KEY, PGRANT_PUT, USER_PUT, Op
from common.vocab import CONSISTENCY_DEFAULT, Consistency
from daemon.identity.secrets import hash_password, hash_secret, new_key_id, new_secret
from daemon.schemas.timefmt import rfc3339
from store import identity as I

if TYPE_CHECKING:
    from daemon.node import Node

Item = tuple[str, str, dict[str, Any]]


def user_json(row: dict[str, Any]) -> dict[str, Any]:
    return {"name": row["name"], "root": row["root"], "removed": row["removed"],
            "has_password": bool(row["password_hash"]),
            "created_at": rfc3339(row["created_at_ms"])}


def key_json(row: dict[str, Any], last_used_ms: int | None = None) -> dict[str, Any]:
    return {"id": row["id"], "user": row["user"], "agent": row["agent"], "label": row["label"],
            "created_at": rfc3339(row["created_at_ms"]), "revoked": row["revoked"],
            "last_used_at": None if last_used_ms is None else rfc3339(last_used_ms)}


def grant_json(row: dict[str, Any]) -> dict[str, Any]:
    return {"user": row["user"], "workspace": row["workspace"], "project": row["project"],
            "access": row["access"], "granted_at": rfc3339(row["at_ms"])}


def user_body(row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    body = {k: row[k] for k in ("name", "root", "password_hash", "removed", "created_at_ms")}
    body.update(changes)
    return body


def key_body(row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    body = {k: row[k] for k in ("id", "user", "agent", "label", "hash", "created_at_ms",
                                "revoked")}
    body.update(changes)
    return body


async def _sync(node: Node, consistency: Consistency = CONSISTENCY_DEFAULT) -> None:
    await node.read_barrier(IDENT_KEY, consistency)


async def _write(node: Node, items: list[Item]) -> list[Op]:
    return await node.write(items)


async def _write_refused(node: Node, items: list[Item]) -> None:
    """Write ``items`` (identity records, which every lane keeps) and return
    once every member refuses what they take away (:func:`refused_everywhere`).

    With lanes each lane's copy is its own ops in its own replica group, so
    each lane writes the one body minted here and confirms its copy with the
    same lane of every member (``/lane/v1/refuse``): the answer comes once
    every lane of every member refuses it."""
    siblings = node.siblings
    if siblings is None:
        await refused_everywhere(node, await node.write(items))
        return
    items = node.ranked(items)  # one stamp for every lane's copy
    wire = [list(item) for item in items]
    done = await asyncio.gather(write_refused_here(node, items),
                                *(siblings.call(i, "refuse", wire) for i in siblings.others),
                                return_exceptions=True)
    for result in done:
        if isinstance(result, BaseException):
            raise result


async def write_refused_here(node: Node, items: list[Item]) -> None:
    """This lane's share of :func:`_write_refused`."""
    await refused_everywhere(node, await node.write_here(items))


async def lane_view(node: Node, user: str, workspace: str | None = None,
                    project: str | None = None) -> dict[str, Any]:
    """What this lane holds of ``user``: the user row, its keys and, given a
    workspace, its grant there (``/lane/v1/ident`` serves it to a sibling)."""
    grant = None if workspace is None else await I.ranked_grant(node.store.reads, user,
                                                                workspace, project)
    return {"user": await I.user(node.store.reads, user),
            "keys": await I.keys(node.store.reads, user=user), "grant": grant}


async def lane_views(node: Node, user: str, workspace: str | None = None,
                     project: str | None = None) -> list[dict[str, Any]]:
    """:func:`lane_view` of this lane, then of every other lane (each after
    its own quorum read of the identity records)."""
    here = await lane_view(node, user, workspace, project)
    if node.siblings is None:
        return [here]
    return [here, *await node.every_other_lane("ident", [user, workspace, project])]


async def _outwait(node: Node) -> None:
    await node.identity.outwait_leases(node.identity.monotonic())


async def refused_everywhere(node: Node, ops: list[Op]) -> None:
    """Return once every member acts on ``ops`` (just written by quorum)."""
    directory = node.identity
    if not directory.has_peers:
        return
    held_since = directory.monotonic()
    mine = {op.op_id for op in ops}
    floor = dict(node.core.vv)
    for origin, seq in mine:
        floor[origin] = min(floor.get(origin, seq), seq - 1)
    timeout = node.settings.cluster.quorum_timeout_ms / 1000

    async def holds(peer: str) -> bool:
        # A member outside the write quorum may not have applied the ops
        # yet when asked (their replication is still on its way): ask it
        # again a few times before falling back to the lease wait.
        for pause in (*limits.identity_confirm_retry_secs, None):
            raw = await node.peers.call(peer, "/peer/v1/pull", {"key": IDENT_KEY, "vv": floor},
                                        timeout_s=timeout)
            if mine <= {(str(w[0]), int(w[1])) for w in raw or []}:
                return True
            if pause is not None:
                await asyncio.sleep(pause)
        return False

    peers = [p.node_id for p in node.settings.cluster.peers]
    answers = await asyncio.gather(*(holds(p) for p in peers), return_exceptions=True)
    if all(a is True for a in answers):
        return
    await directory.outwait_leases(held_since)


async def _live_user(node: Node, name: str) -> dict[str, Any]:
    row = await I.user(node.store.reads, name)
    if row is None or row["removed"]:
        raise NotFound(f"no user {name!r}", user=name)
    return row


# -- users -------------------------------------------------------------------
async def add_user(node: Node, name: str, *, root: bool = False,
                   password: str | None = None) -> dict[str, Any]:
    await _sync(node)
    existing = await I.user(node.store.reads, name)
    if existing is not None:
        if existing["removed"]:
            raise Conflict(f"user {name!r} was removed; a removed name is not reused", user=name)
        raise Conflict(f"user {name!r} already exists", user=name)
    pw = None if password is None else await asyncio.to_thread(hash_password, password)
    row = {"name": name, "root": root, "password_hash": pw, "removed": False,
           "created_at_ms": node.now_ms()}
    await _write(node, [(USER_PUT, IDENT_KEY, row)])
    return user_json(row)


async def list_users(node: Node, *, include_removed: bool = False,
                     consistency: Consistency = CONSISTENCY_DEFAULT) -> dict[str, Any]:
    await _sync(node, consistency)
    rows = await I.users(node.store.reads, include_removed=include_removed)
    return {"users": [user_json(r) for r in rows], "count": len(rows)}


async def remove_user(node: Node, name: str) -> dict[str, Any]:
    """Remove ``name`` and revoke its keys. With lanes, what every lane holds
    decides: a removal whose share failed on one lane (a 503) left the user
    live there, and its retry removes it there too, whichever lane serves it."""
    await _sync(node)
    views = await lane_views(node, name)
    live = [v["user"] for v in views if v["user"] is not None and not v["user"]["removed"]]
    if not live:
        raise NotFound(f"no user {name!r}", user=name)
    # a key still valid on any lane is revoked on every lane
    keys = list({k["id"]: k for v in views for k in v["keys"] if not k["revoked"]}.values())
    items: list[Item] = [(USER_PUT, IDENT_KEY, user_body(live[0], removed=True))]
    items += [(APIKEY_PUT, IDENT_KEY, key_body(k, revoked=True)) for k in keys]
    await _write_refused(node, items)
    return {"name": name, "removed": True, "keys_revoked": [k["id"] for k in keys]}


async def set_password(node: Node, name: str, password: str) -> dict[str, Any]:
    await _sync(node)
    row = await _live_user(node, name)
    pw = await asyncio.to_thread(hash_password, password)
    await _write(node, [(USER_PUT, IDENT_KEY, user_body(row, password_hash=pw))])
    return {"name": name, "password_set": True}


# -- keys --------------------------------------------------------------------
async def create_key(node: Node, user: str, *, agent: str | None = None,
                     label: str | None = None) -> dict[str, Any]:
    await _sync(node)
    await _live_user(node, user)
    secret = new_secret()
    row = {"id": new_key_id(), "user": user, "agent": agent, "label": label,
           "hash": hash_secret(secret), "created_at_ms": node.now_ms(), "revoked": False}
    await _write(node, [(APIKEY_PUT, IDENT_KEY, row)])
    return {**key_json(row), "key": secret}


async def list_keys(node: Node, *, user: str | None = None,
                    consistency: Consistency = CONSISTENCY_DEFAULT) -> dict[str, Any]:
    await _sync(node, consistency)
    rows = await I.keys(node.store.reads, user=user)
    used = node.identity.last_used_ms
    return {"keys": [key_json(r, used.get(r["id"])) for r in rows], "count": len(rows)}


async def revoke_key(node: Node, key_id: str) -> dict[str, Any]:
    await _sync(node)
    row = await I.key(node.store.reads, key_id)
    if row is None:
        raise NotFound(f"no key {key_id!r}", key_id=key_id)
    # With lanes, a key revoked here may not be on a lane whose share of an
    # earlier revocation failed: write it again (the same body) on every lane.
    if not row["revoked"] or node.siblings is not None:
        await _write_refused(node, [(APIKEY_PUT, IDENT_KEY, key_body(row, revoked=True))])
    else:  # revoked by someone else, perhaps not yet acknowledged: outwait it too
        await _outwait(node)
    return {"id": key_id, "revoked": True}


# -- grants --------------------------------------------------------------------
async def grant(node: Node, user: str, workspace: str, project: str | None,
                access: str) -> dict[str, Any]:
    await _sync(node)
    await _live_user(node, user)
    row = {"user": user, "workspace": workspace, "project": project, "access": access,
           "granted": True, "at_ms": node.now_ms()}
    await _write(node, [(PGRANT_PUT, IDENT_KEY, row)])
    return grant_json(row)


def _level(row: dict[str, Any] | None) -> int:
    """What a grant row allows: 0 nothing, 1 read, 2 write."""
    if row is None or not row["granted"]:
        return 0
    return 2 if row["access"] == "write" else 1


async def revoke(node: Node, user: str, workspace: str, project: str | None,
                 access: str) -> dict[str, Any]:
    """Take ``access`` away: revoking write leaves read; revoking read
    removes the grant (write implies read)."""
    await _sync(node)
    views = await lane_views(node, user, workspace, project)
    rows = [v["grant"] for v in views if v["grant"] is not None]
    # What this revocation leaves: the latest decision (the best-ranked row
    # of any lane), capped by what it takes away. It is written when any lane
    # grants more than that: with lanes, a revocation whose share failed on
    # one lane (a 503) left it granted there, and its retry, through any
    # lane, takes it away there too; a lane granting less is left alone.
    newest = max(rows, key=lambda r: tuple(r["rank"])) if rows else None
    if newest is not None:  # what this writes must outrank it, whichever clock made it
        node.core.observe_stamp(int(newest["rank"][0]), node.now_ms())
    left = min(_level(newest), 1 if access == "write" else 0)
    if not any(_level(r) > left for r in rows):
        if rows:  # taken away by someone else, perhaps not yet acknowledged
            await _outwait(node)
        return {"user": user, "workspace": workspace, "project": project, "access": None,
                "changed": False}
    assert newest is not None
    keep = "read" if left == 1 else None
    body = {"user": user, "workspace": workspace, "project": project,
            "access": keep or newest["access"], "granted": keep is not None,
            "at_ms": node.now_ms()}
    await _write_refused(node, [(PGRANT_PUT, IDENT_KEY, body)])
    return {"user": user, "workspace": workspace, "project": project, "access": keep,
            "changed": True}


async def list_grants(node: Node, *, user: str | None = None,
                      consistency: Consistency = CONSISTENCY_DEFAULT) -> dict[str, Any]:
    await _sync(node, consistency)
    rows = await I.grants(node.store.reads, user=user)
    return {"grants": [grant_json(r) for r in rows], "count": len(rows)}
