"""Reads of the replicated users, API keys and project grants (migration 0008).

Everything here is a read on the pool's read-only connections; the rows are
written only by the merge rules of :mod:`store.apply` (``user.put``,
``apikey.put``, ``pgrant.put``). Rows come back as plain dicts with the
shapes of :func:`store.records.user_row` and friends (``project`` None for a
grant on the whole workspace).
"""

from __future__ import annotations

from typing import Any

from common import limits
from store.reader import ReadPool

_USER = "name, root, password_hash, removed, created_at_ms"
_KEY = "id, user, agent, label, hash, created_at_ms, revoked"
_GRANT = "user, workspace, project, access, granted, at_ms"


def _user(r: Any) -> dict[str, Any]:
    return {"name": r["name"], "root": bool(r["root"]), "password_hash": r["password_hash"],
            "removed": bool(r["removed"]), "created_at_ms": r["created_at_ms"]}


def _key(r: Any) -> dict[str, Any]:
    return {"id": r["id"], "user": r["user"], "agent": r["agent"], "label": r["label"],
            "hash": r["hash"], "created_at_ms": r["created_at_ms"], "revoked": bool(r["revoked"])}


def _grant(r: Any) -> dict[str, Any]:
    return {"user": r["user"], "workspace": r["workspace"], "project": r["project"] or None,
            "access": r["access"], "granted": bool(r["granted"]), "at_ms": r["at_ms"]}


async def user(reads: ReadPool, name: str) -> dict[str, Any] | None:
    r = await reads.fetchone(f"SELECT {_USER} FROM users WHERE name = ?", (name,))
    return None if r is None else _user(r)


async def users(reads: ReadPool, *, include_removed: bool = False) -> list[dict[str, Any]]:
    where = "" if include_removed else " WHERE removed = 0"
    rows = await reads.fetchall(f"SELECT {_USER} FROM users{where} ORDER BY name LIMIT ?",
                                (limits.identity_list_max,))
    return [_user(r) for r in rows]


async def key(reads: ReadPool, key_id: str) -> dict[str, Any] | None:
    r = await reads.fetchone(f"SELECT {_KEY} FROM api_keys WHERE id = ?", (key_id,))
    return None if r is None else _key(r)


async def keys_by_hash(reads: ReadPool, digest: str) -> list[dict[str, Any]]:
    rows = await reads.fetchall(f"SELECT {_KEY} FROM api_keys WHERE hash = ?", (digest,))
    return [_key(r) for r in rows]


async def keys(reads: ReadPool, *, user: str | None = None) -> list[dict[str, Any]]:
    where, params = ("", ()) if user is None else (" WHERE user = ?", (user,))
    rows = await reads.fetchall(
        f"SELECT {_KEY} FROM api_keys{where} ORDER BY created_at_ms, id LIMIT ?",
        (*params, limits.identity_list_max))
    return [_key(r) for r in rows]


async def grants(reads: ReadPool, *, user: str | None = None,
                 granted_only: bool = True) -> list[dict[str, Any]]:
    cond = ["granted = 1"] if granted_only else []
    params: list[Any] = []
    if user is not None:
        cond.append("user = ?")
        params.append(user)
    where = f" WHERE {' AND '.join(cond)}" if cond else ""
    rows = await reads.fetchall(
        f"SELECT {_GRANT} FROM project_grants{where} ORDER BY user, workspace, project LIMIT ?",
        (*params, limits.identity_list_max))
    return [_grant(r) for r in rows]


async def grant(reads: ReadPool, user: str, workspace: str,
                project: str | None) -> dict[str, Any] | None:
    r = await reads.fetchone(
        f"SELECT {_GRANT} FROM project_grants WHERE user = ? AND workspace = ? AND project = ?",
        (user, workspace, project or ""))
    return None if r is None else _grant(r)


async def ranked_grant(reads: ReadPool, user: str, workspace: str,
                       project: str | None) -> dict[str, Any] | None:
    """:func:`grant`, with ``rank``: the stamp it won by (``[hlc, origin, seq]``)."""
    r = await reads.fetchone(
        f"SELECT {_GRANT}, hlc, origin, seq FROM project_grants"
        " WHERE user = ? AND workspace = ? AND project = ?", (user, workspace, project or ""))
    return None if r is None else {**_grant(r), "rank": [r["hlc"], r["origin"], r["seq"]]}
