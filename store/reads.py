"""``DomainReads``: the queries the services run, beside the storage contract.

:class:`store.db.Store` is two things. One is the storage contract the
effect driver and the peer protocol need (apply and log ops, pull what a
peer lacks, collect, promises, incarnation, the mailbox rebuild): it stays
in :mod:`store.db`. The other is the domain's reads (memories, the inbox,
stream replay, agents, projects, sessions, mailbox pages): they live here,
as a mixin over the read pool, and :class:`store.db.Store` inherits them,
so a caller still writes ``store.inbox(...)``. The cut is the one
:class:`daemon.ports.StoreReads` draws; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from common import limits
from common.lifecycle import AWAITING, CLAIMED, EDITING, MSG_COMPLETE, MSG_EXPIRE, PENDING
from store import queries as Q
from store.reader import ReadPool
from store.records import MESSAGE_FIELDS


class DomainReads:
    """Read-only queries over ``_reads``; every row comes back as a dict in
    the shapes of :mod:`store.queries`."""

    def __init__(self, reads: ReadPool) -> None:
        self._reads = reads
        # Projects seen to exist, so a send needs no read of the database
        # for a project it has seen before. Only a purge (msg.purge) takes a
        # project away: applying one empties this cache (store.db.Store).
        self._projects: set[tuple[str, str]] = set()

    # -- memories -------------------------------------------------------------------

    async def get_memory(self, memory_id: str, *, now_ms: int) -> dict[str, Any] | None:
        row = await self._reads.fetchone(
            f"SELECT {Q.MEMORY_COLS} FROM memories WHERE id = :id AND {Q.NOT_EXPIRED}",
            {"id": memory_id, "now": now_ms})
        return None if row is None else Q.memory(row)

    async def list_memories(self, *, namespace: str | None = None, tier: str | None = None,
                            tags: list[str] | None = None, min_priority: int | None = None,
                            agent_id: str | None = None, limit: int, offset: int = 0,
                            below: tuple[int, str] | None = None, keys_only: bool = False,
                            now_ms: int) -> list[dict[str, Any]]:
        """Live memories, last changed first (then id, descending). ``below``
        (``(updated_at_ms, id)``) starts after that key: a keyset page. With
        ``keys_only`` each row is just ``updated_at_ms`` and ``id``."""
        where = [Q.NOT_EXPIRED]
        params: dict[str, Any] = {"now": now_ms, "limit": limit, "offset": offset}
        Q.memory_filters(where, params, namespace=namespace, tier=tier, tags=tags,
                         min_priority=min_priority, agent_id=agent_id)
        if below is not None:
            where.append("(m.updated_at_ms, m.id) < (:below_at, :below_id)")
            params["below_at"], params["below_id"] = int(below[0]), str(below[1])
        cols = "m.updated_at_ms, m.id" if keys_only else Q.MEMORY_COLS
        rows = await self._reads.fetchall(
            f"SELECT {cols} FROM memories m WHERE {' AND '.join(where)}"
            " ORDER BY m.updated_at_ms DESC, m.id DESC LIMIT :limit OFFSET :offset", params)
        if keys_only:
            return [{"updated_at_ms": r[0], "id": r[1]} for r in rows]
        return [Q.memory(r) for r in rows]

    async def memories_since(self, since_ms: int, *, limit: int,
                             now_ms: int) -> list[dict[str, Any]]:
        """Live memories updated strictly after ``since_ms``, oldest first (the
        upstream ``/sync/since`` pull, whose ``since`` is exclusive)."""
        rows = await self._reads.fetchall(
            f"SELECT {Q.MEMORY_COLS} FROM memories WHERE {Q.NOT_EXPIRED}"
            " AND updated_at_ms > :since ORDER BY updated_at_ms, id LIMIT :limit",
            {"now": now_ms, "since": since_ms, "limit": limit})
        return [Q.memory(r) for r in rows]

    @property
    def reads(self) -> ReadPool:
        """The read-only pool, for the cross-record reads of :mod:`store.search`."""
        return self._reads

    # -- inbox ---------------------------------------------------------------------

    async def inbox(self, agent_id: str, *, unread_only: bool, limit: int,
                    min_priority: int | None = None, since_ms: int | None = None,
                    tier: str | None = None, thread_id: str | None = None,
                    now_ms: int) -> list[dict[str, Any]]:
        """Notifications to ``agent_id``, highest priority then newest first;
        every filter applies before ``limit``."""
        params: dict[str, Any] = {"agent": agent_id, "now": now_ms, "limit": limit,
                                  "min_priority": min_priority, "since": since_ms, "tier": tier,
                                  "thread": thread_id}
        sql = Q.inbox_sql(unread_only=unread_only, min_priority=min_priority is not None,
                          since=since_ms is not None, tier=tier is not None,
                          thread=thread_id is not None)
        rows = await self._reads.fetchall(sql, params)
        return [Q.note(r) for r in rows]

    async def inbox_count(self, agent_id: str, *, unread_only: bool, now_ms: int) -> int:
        unread = " AND read = 0" if unread_only else ""
        row = await self._reads.fetchone(
            f"SELECT count(*) FROM notes WHERE to_agent = :agent AND {Q.NOT_EXPIRED}{unread}",
            {"agent": agent_id, "now": now_ms})
        return int(row[0]) if row else 0

    async def unread_senders(self, agent_id: str, *, now_ms: int,
                             limit: int) -> list[tuple[str, int]]:
        """Who sent ``agent_id``'s unread, unexpired notifications: (sender, how many),
        most first, then by name; at most ``limit`` senders."""
        rows = await self._reads.fetchall(
            f"SELECT from_agent, count(*) AS n FROM notes WHERE to_agent = :agent"
            f" AND read = 0 AND {Q.NOT_EXPIRED} GROUP BY from_agent"
            " ORDER BY n DESC, from_agent LIMIT :limit",
            {"agent": agent_id, "now": now_ms, "limit": limit})
        return [(str(r[0]), int(r[1])) for r in rows]

    async def notifications(self, ids: Iterable[str]) -> list[dict[str, Any]]:
        """The notifications with these ids, in the order asked; unknown ids are skipped."""
        wanted = list(dict.fromkeys(ids))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            rows = await self._reads.fetchall(
                f"SELECT {Q.NOTE_COLS} FROM notes WHERE id IN ({', '.join('?' * len(chunk))})",
                chunk)
            found.update((r["id"], Q.note(r)) for r in rows)
        return [found[i] for i in wanted if i in found]

    # -- stream replay (daemon/http/stream_hub.py) ---------------------------------

    @staticmethod
    def _not_covered(cursor: dict[str, int], params: dict[str, Any], prefix: str = "") -> str:
        """SQL: the row's (origin, seq) is not covered by ``cursor`` (per-origin watermarks)."""
        terms = []
        for i, (origin, seq) in enumerate(sorted(cursor.items())):
            params[f"co{i}"], params[f"cs{i}"] = origin, seq
            terms.append(f"({prefix}origin = :co{i} AND {prefix}seq <= :cs{i})")
        return f"NOT ({' OR '.join(terms)})" if terms else "1"

    async def notes_not_covered(self, agent_id: str, cursor: dict[str, int], *,
                                after: tuple[int, str, int] | None, limit: int,
                                now_ms: int) -> list[dict[str, Any]]:
        """Unexpired notifications to ``agent_id`` whose op id ``cursor`` does
        not cover, in (hlc, origin, seq) order after ``after``; each row has
        its ``hlc``, ``origin`` and ``seq``."""
        params: dict[str, Any] = {"agent": agent_id, "now": now_ms, "limit": limit}
        where = ["to_agent = :agent", Q.NOT_EXPIRED, self._not_covered(cursor, params)]
        if after is not None:
            where.append("(hlc, origin, seq) > (:ah, :ao, :as)")
            params.update(ah=after[0], ao=after[1], **{"as": after[2]})
        rows = await self._reads.fetchall(
            f"SELECT {Q.NOTE_COLS}, hlc, origin, seq FROM notes WHERE {' AND '.join(where)}"
            " ORDER BY hlc, origin, seq LIMIT :limit", params)
        return [{**Q.note(r), "hlc": r["hlc"], "origin": r["origin"], "seq": r["seq"]}
                for r in rows]

    async def messages_not_covered(self, workspace: str, project: str, cursor: dict[str, int],
                                   *, after: tuple[int, str, int] | None, limit: int,
                                   agent: str | None = None) -> list[dict[str, Any]]:
        """Messages to the mailbox (any state; with ``agent``, only those it
        could claim) whose send ``cursor`` does not cover, in mailbox order
        after ``after``; each row has its ``hlc``, ``origin`` and ``seq``."""
        params: dict[str, Any] = {"ws": workspace, "proj": project}
        where = ["m.to_workspace = :ws AND m.to_project = :proj",
                 self._not_covered(cursor, params, "m.")]
        if agent is not None:
            where.append("(m.to_agent IS NULL OR m.to_agent = :agent)")
            params["agent"] = agent
        if after is not None:
            where.append("(m.hlc, m.origin, m.seq) > (:ah, :ao, :as)")
            params.update(ah=after[0], ao=after[1], **{"as": after[2]})
        rows = await self._reads.fetchall(
            f"SELECT {Q.MESSAGE_COLS}, m.seq AS m_seq FROM {Q.MESSAGE_FROM}"
            f" WHERE {' AND '.join(where)} ORDER BY {Q.FIFO} LIMIT {int(limit)}", params)
        return [{**Q.message(r), "hlc": r["hlc"], "origin": r["origin"], "seq": r["m_seq"]}
                for r in rows]

    async def completions_not_covered(self, workspace: str, project: str,
                                      cursor: dict[str, int], *,
                                      after: tuple[int, str, int] | None,
                                      limit: int) -> list[dict[str, Any]]:
        """Completed messages of the mailbox whose winning ``msg.complete``
        ``cursor`` does not cover, in that op's (hlc, origin, seq) order after
        ``after``; each row is the message with ``kind`` ``msg.complete`` and
        the completion's ``hlc``, ``origin`` and ``seq``."""
        params: dict[str, Any] = {"ws": workspace, "proj": project}
        where = ["m.to_workspace = :ws AND m.to_project = :proj",
                 f"m.state = '{CLAIMED}'", "c.id IS NOT NULL", "c.purged = 0",
                 "c.token IS t.token",
                 self._not_covered(cursor, params, "c.")]
        if after is not None:
            where.append("(c.hlc, c.origin, c.seq) > (:ah, :ao, :as)")
            params.update(ah=after[0], ao=after[1], **{"as": after[2]})
        rows = await self._reads.fetchall(
            f"SELECT {Q.MESSAGE_COLS}, c.hlc AS c_hlc, c.origin AS c_origin, c.seq AS c_seq"
            f" FROM {Q.MESSAGE_FROM} WHERE {' AND '.join(where)}"
            f" ORDER BY c.hlc, c.origin, c.seq LIMIT {int(limit)}", params)
        return [{**Q.message(r), "kind": MSG_COMPLETE, "hlc": r["c_hlc"],
                 "origin": r["c_origin"], "seq": r["c_seq"]} for r in rows]

    async def requeues_not_covered(self, workspace: str, project: str,
                                   cursor: dict[str, int], *,
                                   after: tuple[int, str, int] | None, limit: int,
                                   agent: str | None = None) -> list[dict[str, Any]]:
        """Messages of the mailbox back in the queue after a lease ran out
        (their winning hold is a ``msg.expire``, and they are still pending)
        whose expiry ``cursor`` does not cover, in that op's order after
        ``after``; each row is the message with ``kind`` ``msg.expire`` and
        the expiry's ``hlc``, ``origin`` and ``seq``."""
        params: dict[str, Any] = {"ws": workspace, "proj": project}
        where = ["m.to_workspace = :ws AND m.to_project = :proj",
                 f"m.state = '{PENDING}'", f"h.kind = '{MSG_EXPIRE}'",
                 self._not_covered(cursor, params, "h.")]
        if agent is not None:
            where.append("(m.to_agent IS NULL OR m.to_agent = :agent)")
            params["agent"] = agent
        if after is not None:
            where.append("(h.hlc, h.origin, h.seq) > (:ah, :ao, :as)")
            params.update(ah=after[0], ao=after[1], **{"as": after[2]})
        rows = await self._reads.fetchall(
            f"SELECT {Q.MESSAGE_COLS}, h.hlc AS h_hlc, h.origin AS h_origin, h.seq AS h_seq"
            f" FROM {Q.MESSAGE_FROM} WHERE {' AND '.join(where)}"
            f" ORDER BY h.hlc, h.origin, h.seq LIMIT {int(limit)}", params)
        return [{**Q.message(r), "kind": MSG_EXPIRE, "hlc": r["h_hlc"],
                 "origin": r["h_origin"], "seq": r["h_seq"]} for r in rows]

    # -- agents, projects, sessions --------------------------------------------------------

    async def list_agents(self) -> list[dict[str, Any]]:
        rows = await self._reads.fetchall(
            f"SELECT {Q.AGENT_COLS} FROM agents WHERE reg_hlc IS NOT NULL ORDER BY agent_id")
        return [Q.agent(r) for r in rows]

    async def get_agent(self, agent_id: str) -> dict[str, Any] | None:
        row = await self._reads.fetchone(
            f"SELECT {Q.AGENT_COLS} FROM agents WHERE agent_id = ? AND reg_hlc IS NOT NULL",
            (agent_id,))
        return None if row is None else Q.agent(row)

    async def project_exists(self, workspace: str, project: str) -> bool:
        if (workspace, project) in self._projects:
            return True
        row = await self._reads.fetchone(
            f"SELECT 1 FROM ({Q.LIVE_HARNESSES}) WHERE workspace = ? AND project = ? LIMIT 1",
            (workspace, project))
        if row is None:
            return False
        if len(self._projects) < limits.known_projects_cached_max:
            self._projects.add((workspace, project))
        return True

    async def project_harnesses(self, workspace: str, project: str) -> set[str]:
        rows = await self._reads.fetchall(
            f"SELECT harness FROM ({Q.LIVE_HARNESSES}) WHERE workspace = ? AND project = ?",
            (workspace, project))
        return {r[0] for r in rows}

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        row = await self._reads.fetchone(
            f"SELECT {Q.SESSION_COLS} FROM sessions s WHERE session_id = ?"
            f" AND NOT {Q.SESSION_HIDDEN}", (session_id,))
        return None if row is None else dict(row)

    async def last_active_project(self) -> tuple[str, str] | None:
        row = await self._reads.fetchone(
            f"SELECT workspace, project FROM ({Q.LIVE_HARNESSES})"
            " ORDER BY last_at_ms DESC, workspace, project LIMIT 1")
        return None if row is None else (row[0], row[1])

    async def list_projects(self) -> list[dict[str, Any]]:
        return Q.projects(await self._reads.fetchall(
            f"SELECT * FROM ({Q.LIVE_HARNESSES}) ORDER BY workspace, project, harness"))

    async def purge_marks(self) -> list[dict[str, Any]]:
        """Every mailbox's mark (its greatest purge), as
        :meth:`store.in_memory.Replica.purge_marks` gives them."""
        rows = await self._reads.fetchall(
            f"SELECT {', '.join(Q.PURGE_MARK_COLS)} FROM msg_purge WHERE seq > 0"
            " ORDER BY workspace, project")  # not a mark of proj.hide alone
        return [dict(r) for r in rows]

    async def memory_ids_under(self, namespace: str, *, limit: int) -> list[str]:
        """Ids of the memories in ``namespace`` or below it (``namespace/...``),
        at most ``limit``, expired ones included."""
        rows = await self._reads.fetchall(
            "SELECT id FROM memories WHERE namespace = ?1"
            " OR substr(namespace, 1, length(?1) + 1) = ?1 || '/' ORDER BY id LIMIT ?2",
            (namespace, limit))
        return [r[0] for r in rows]

    async def mailbox_projects(self, workspace: str) -> list[str]:
        """Projects of ``workspace`` that hold a message or a purge mark."""
        rows = await self._reads.fetchall(
            "SELECT to_project FROM messages WHERE to_workspace = ?1"
            " UNION SELECT project FROM msg_purge WHERE workspace = ?1 ORDER BY 1", (workspace,))
        return [r[0] for r in rows if r[0] is not None]

    async def is_purged(self, msg_id: str) -> bool:
        return await self._reads.fetchone(
            "SELECT 1 FROM msg_purged WHERE id = ?", (msg_id,)) is not None

    # -- mailbox ------------------------------------------------------------------

    async def _messages(self, where: str, params: Iterable[Any] | dict[str, Any],
                        order: str, limit: int, offset: int = 0) -> list[dict[str, Any]]:
        rows = await self._reads.fetchall(
            f"SELECT {Q.MESSAGE_COLS} FROM {Q.MESSAGE_FROM} WHERE {where}"
            f" ORDER BY {order} LIMIT {int(limit)} OFFSET {int(offset)}", params)
        return [Q.message(r) for r in rows]

    async def message(self, msg_id: str) -> dict[str, Any] | None:
        found = await self._messages("m.id = ?", (msg_id,), Q.FIFO, 1)
        return found[0] if found else None

    async def sent_body(self, msg_id: str) -> dict[str, Any] | None:
        """The message's fields as its send wrote them (a saved edit's
        subject and body left out): what a retried send is answered with."""
        row = await self._reads.fetchone(
            f"SELECT {', '.join(MESSAGE_FIELDS)} FROM messages WHERE id = ?", (msg_id,))
        return None if row is None else {name: row[name] for name in MESSAGE_FIELDS}

    async def mailbox_pending(self, workspace: str, project: str, *, limit: int,
                              agent: str | None = None, with_held: bool = False,
                              thread_id: str | None = None) -> list[dict[str, Any]]:
        """Pending messages of a mailbox, oldest send first; with ``agent``,
        only those addressed to nobody in particular or to that agent; with
        ``with_held``, the messages held for an edit too, in their places;
        with ``thread_id``, only that thread's."""
        states = f"('{PENDING}', '{EDITING}')" if with_held else f"('{PENDING}')"
        where = f"m.to_workspace = ? AND m.to_project = ? AND m.state IN {states}"
        params: list[Any] = [workspace, project]
        if agent is not None:
            where += " AND (m.to_agent IS NULL OR m.to_agent = ?)"
            params.append(agent)
        if thread_id is not None:
            where += " AND m.thread_id = ?"
            params.append(thread_id)
        return await self._messages(where, params, Q.FIFO, limit)

    async def mailbox_pending_count(self, workspace: str, project: str,
                                    agent: str | None = None) -> int:
        """Pending messages; with ``agent``, only those it may claim."""
        for_agent = " AND (to_agent IS NULL OR to_agent = ?)" if agent is not None else ""
        row = await self._reads.fetchone(
            "SELECT count(*) FROM messages WHERE to_workspace = ? AND to_project = ?"
            f" AND state = '{PENDING}'{for_agent}",
            (workspace, project) if agent is None else (workspace, project, agent))
        return int(row[0]) if row else 0

    async def mailbox_messages(self, workspace: str, project: str, *, limit: int,
                               offset: int = 0,
                               thread_id: str | None = None) -> list[dict[str, Any]]:
        """Every message of a mailbox, any state, newest first (audit, web);
        with ``thread_id``, only that thread's."""
        where, params = "m.to_workspace = ? AND m.to_project = ?", [workspace, project]
        if thread_id is not None:
            where, params = where + " AND m.thread_id = ?", [*params, thread_id]
        return await self._messages(where, params,
                                    "m.hlc DESC, m.origin DESC, m.seq DESC", limit, offset)

    async def outbox(self, from_workspace: str, from_project: str, *, limit: int,
                     pending_only: bool = True, with_held: bool = False,
                     thread_id: str | None = None) -> list[dict[str, Any]]:
        """A project's sent messages, oldest first: pending ones (with
        ``with_held``, those held for an edit too), or every state; with
        ``thread_id``, only that thread's."""
        where = "m.from_workspace = ? AND m.from_project = ?"
        params: list[Any] = [from_workspace, from_project]
        if pending_only:  # still queued: pending, or awaiting an approver (and held)
            where += (f" AND m.state IN ('{PENDING}', '{AWAITING}', '{EDITING}')" if with_held
                      else f" AND m.state IN ('{PENDING}', '{AWAITING}')")
        if thread_id is not None:
            where, params = where + " AND m.thread_id = ?", [*params, thread_id]
        return await self._messages(where, params, Q.FIFO, limit)

    async def sent_messages(self, from_workspace: str, from_project: str, *, limit: int,
                            offset: int = 0,
                            thread_id: str | None = None) -> list[dict[str, Any]]:
        """Every message a project sent, any state, newest first (web); with
        ``thread_id``, only that thread's."""
        where = "m.from_workspace = ? AND m.from_project = ?"
        params: list[Any] = [from_workspace, from_project]
        if thread_id is not None:
            where, params = where + " AND m.thread_id = ?", [*params, thread_id]
        return await self._messages(where, params,
                                    "m.hlc DESC, m.origin DESC, m.seq DESC", limit, offset)

    async def mailbox_editing(self, workspace: str, project: str, *,
                              limit: int) -> list[dict[str, Any]]:
        """Messages of a mailbox held for an edit, in queue order (web banner)."""
        return await self._messages(
            f"m.to_workspace = ? AND m.to_project = ? AND m.state = '{EDITING}'",
            (workspace, project), Q.FIFO, limit)

    async def mailbox_awaiting(self, workspace: str, project: str, *,
                               limit: int) -> list[dict[str, Any]]:
        """Messages of a mailbox awaiting an approver, in queue order."""
        return await self._messages(
            f"m.to_workspace = ? AND m.to_project = ? AND m.state = '{AWAITING}'",
            (workspace, project), Q.FIFO, limit)

    async def claim_by_request(self, workspace: str, project: str,
                               request_id: str) -> dict[str, Any] | None:
        """The message of this mailbox claimed under ``request_id``, if any."""
        found = await self._messages(
            "m.to_workspace = ? AND m.to_project = ? AND t.request_id = ?"
            f" AND t.state = '{CLAIMED}' AND m.state = '{CLAIMED}'", (workspace, project, request_id), Q.FIFO, 1)
        return found[0] if found else None

