"""The memories a project brief is compiled from (``GET /handoff`` with a brief).

A project's memories are those whose namespace is ``<workspace>/<project>``
or lies under it (``<workspace>/<project>/...``). A memory's *path* in the
project is the rest of its namespace, then its title: ``_rules/style`` is
the title ``_rules/style`` in ``default/app``, or the title ``style`` in
``default/app/_rules``. Its *pages* are the memories tagged ``pinned`` and
those whose path starts with ``_rules/`` or ``_slots/``
(:func:`project_pages`); :func:`recent_memories` gives the pointers. Both
compare namespaces by range (``ns/`` up to ``ns0``, ``0`` following ``/``),
never with ``LIKE``, so ``_`` and ``%`` in a project's name are plain text.
Nothing here writes.
"""

from __future__ import annotations

from typing import Any, Final

from store import queries as Q
from store.reader import ReadPool

PINNED_TAG: Final = "pinned"
_M_COLS = ", ".join(f"m.{c.strip()}" for c in Q.MEMORY_COLS.split(","))
_LIVE = "(m.expires_at_ms IS NULL OR m.expires_at_ms > :now)"
_IN_PROJECT = "(m.namespace = :ns OR (m.namespace >= :lo AND m.namespace < :hi))"


def _params(workspace: str, project: str, now_ms: int, limit: int) -> dict[str, Any]:
    ns = f"{workspace}/{project}"
    return {"ns": ns, "lo": ns + "/", "hi": ns + "0", "now": now_ms, "limit": limit}


def page_path(row: dict[str, Any], workspace: str, project: str) -> str:
    """The memory's path in its project: the rest of its namespace, then its title."""
    rest = str(row.get("namespace") or "")[len(workspace) + len(project) + 2:]
    title = str(row.get("title") or "")
    return f"{rest}/{title}" if rest else title


async def project_pages(reads: ReadPool, workspace: str, project: str, *, now_ms: int,
                        limit: int) -> list[dict[str, Any]]:
    """Live pinned, ``_rules/`` and ``_slots/`` memories of the project,
    highest priority then newest first, at most ``limit``."""
    params = _params(workspace, project, now_ms, limit)
    params.update(pinned=PINNED_TAG, rules=params["ns"] + "/_rules/",
                  slots=params["ns"] + "/_slots/")
    path = "(m.namespace || '/' || m.title)"
    rows = await reads.fetchall(
        f"SELECT {_M_COLS} FROM memories m WHERE {_LIVE} AND {_IN_PROJECT} AND ("
        " EXISTS (SELECT 1 FROM json_each(m.tags) WHERE value = :pinned)"
        f" OR substr({path}, 1, length(:rules)) = :rules"
        f" OR substr({path}, 1, length(:slots)) = :slots)"
        " ORDER BY m.priority DESC, m.updated_at_ms DESC, m.id LIMIT :limit", params)
    return [Q.memory(r) for r in rows]


async def recent_memories(reads: ReadPool, workspace: str, project: str, *, now_ms: int,
                          limit: int) -> list[dict[str, Any]]:
    """The project's most recently changed live memories, newest first."""
    rows = await reads.fetchall(
        f"SELECT {_M_COLS} FROM memories m WHERE {_LIVE} AND {_IN_PROJECT}"
        " ORDER BY m.updated_at_ms DESC, m.id DESC LIMIT :limit",
        _params(workspace, project, now_ms, limit))
    return [Q.memory(r) for r in rows]
