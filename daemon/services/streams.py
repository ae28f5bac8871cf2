"""What a push stream shows: the events of one inbox or one mailbox.

A :class:`Source` names the hub key a stream subscribes to, renders an op
the hub offers live, and reads from the store what a resumed stream missed
(rows whose op id the client's cursor does not cover, oldest first, a page
at a time). The HTTP side (:mod:`daemon.api.streams`) writes both in the
same shape, so a client cannot tell a replayed event from a live one.

A mailbox stream also carries ``message_complete`` (a claimed message's
outcome: ``message_id``, ``completion``), live and on replay (the winning
completion of each message the cursor does not cover), beside ``message``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from common import limits
from common.lifecycle import PENDING
from common.ops import MSG_COMPLETE, Op, inbox_key, mailbox_key
from daemon.ports import StreamPorts
from daemon.schemas.notify import message_json
from daemon.services.mail import completion_json, public_message

MESSAGE_COMPLETE_EVENT = "message_complete"

Row = dict[str, Any]
OrderKey = tuple[int, str, int]


class Source(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def event(self) -> str: ...
    @property
    def agent(self) -> str | None: ...

    def event_of(self, kind: str | None) -> str: ...
    def live(self, op: Op, now_ms: int) -> dict[str, Any] | None: ...
    async def replay(self, cursor: dict[str, int], after: OrderKey | None,
                     now_ms: int) -> list[Row]: ...
    def replayed(self, row: Row) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class InboxSource:
    """Notifications to one agent (event ``notify``)."""

    node: StreamPorts
    agent_id: str
    event: str = "notify"
    agent: str | None = None

    @property
    def key(self) -> str:
        return inbox_key(self.agent_id)

    def event_of(self, kind: str | None) -> str:
        return self.event

    def live(self, op: Op, now_ms: int) -> dict[str, Any] | None:
        expires = op.body.get("expires_at_ms")
        if expires is not None and expires <= now_ms:
            return None
        return {"agent_id": self.agent_id, "notification": message_json({**op.body, "read": False})}

    async def replay(self, cursor: dict[str, int], after: OrderKey | None,
                     now_ms: int) -> list[Row]:
        return await self.node.store.notes_not_covered(
            self.agent_id, cursor, after=after, limit=limits.stream_replay_page, now_ms=now_ms)

    def replayed(self, row: Row) -> dict[str, Any]:
        return {"agent_id": self.agent_id, "notification": message_json(row)}


@dataclass(frozen=True, slots=True)
class MailboxSource:
    """Messages sent to one project's mailbox (event ``message``); with
    ``agent``, only those that harness could claim."""

    node: StreamPorts
    workspace: str
    project: str
    agent: str | None = None
    event: str = "message"

    @property
    def key(self) -> str:
        return mailbox_key(self.workspace, self.project)

    def _wrap(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"workspace": self.workspace, "project": self.project, "message": msg}

    def _done(self, message_id: str, done: dict[str, Any] | None) -> dict[str, Any]:
        return {"workspace": self.workspace, "project": self.project,
                "message_id": message_id, "completion": completion_json(done)}

    def event_of(self, kind: str | None) -> str:
        return MESSAGE_COMPLETE_EVENT if kind == MSG_COMPLETE else self.event

    def live(self, op: Op, now_ms: int) -> dict[str, Any] | None:
        if op.kind == MSG_COMPLETE:
            return self._done(str(op.body["id"]), op.body)
        return self._wrap(public_message({**op.body, "state": PENDING}))

    async def replay(self, cursor: dict[str, int], after: OrderKey | None,
                     now_ms: int) -> list[Row]:
        page = limits.stream_replay_page
        sends = await self.node.store.messages_not_covered(
            self.workspace, self.project, cursor, after=after, limit=page, agent=self.agent)
        dones = await self.node.store.completions_not_covered(
            self.workspace, self.project, cursor, after=after, limit=page)
        rows = sorted([*sends, *dones], key=lambda r: (r["hlc"], r["origin"], r["seq"]))
        return rows[:page]  # both pages end at or after this page's end: none skipped

    def replayed(self, row: Row) -> dict[str, Any]:
        if row.get("kind") == MSG_COMPLETE:
            return self._done(str(row["id"]), row.get("completion"))
        return self._wrap(public_message(row))
