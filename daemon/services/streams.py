"""What a push stream shows: the events of one inbox or one mailbox.

A :class:`Source` names the hub key a stream subscribes to, renders an op
the hub offers live, and reads from the store what a resumed stream missed
(rows whose op id the client's cursor does not cover, oldest first, a page
at a time). The HTTP side (:mod:`daemon.api.streams`) writes both in the
same shape, so a client cannot tell a replayed event from a live one.

One record renders as one event or more (:class:`Rendered`): a notification
is our ``notify`` and then upstream's ``agent_notified`` (the fields of
upstream's inbox stream, a digest of the body and never the body), so a
client written for either hears of it with nothing extra to ask. A source
also reads one record back by id (:meth:`Source.record`), for a stream
resumed between two events of one record.

A mailbox stream also carries ``message_complete`` (a claimed message's
outcome: ``message_id``, ``completion``), live and on replay (the winning
completion of each message the cursor does not cover), beside ``message``.
A message whose lease ran out (``msg.expire``: back in the queue) is
announced again as ``message``, with ``requeued`` true and ``deliveries``
(how many times it was handed out), live (id, state, agent and deliveries
only: the op carries no more) and on replay (the whole message, while it
is still pending), so ``pop --wait`` and ``listen --claim`` take it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from common import limits
from common.lifecycle import AWAITING, DECISION_KINDS, PENDING
from common.ops import MSG_APPROVE, MSG_COMPLETE, MSG_EXPIRE, Op, inbox_key, mailbox_key
from daemon.ports import StreamPorts
from daemon.schemas.notify import AGENT_NOTIFIED, agent_notified_json, message_json
from daemon.services.mail import completion_json, public_message

MESSAGE_COMPLETE_EVENT = "message_complete"

Row = dict[str, Any]
OrderKey = tuple[int, str, int]


@dataclass(frozen=True, slots=True)
class Rendered:
    """The events one record shows as, in order (event name, data)."""

    record: str  # the record's id: a notification's, a message's
    events: list[tuple[str, dict[str, Any]]]


class Source(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def agent(self) -> str | None: ...

    def live(self, op: Op, now_ms: int) -> Rendered | None: ...
    async def replay(self, cursor: dict[str, int], after: OrderKey | None,
                     now_ms: int) -> list[Row]: ...
    def replayed(self, row: Row) -> Rendered: ...
    async def record(self, record_id: str, origin: str, seq: int,
                     now_ms: int) -> Rendered | None: ...


@dataclass(frozen=True, slots=True)
class InboxSource:
    """Notifications to one agent: events ``notify`` and ``agent_notified``."""

    node: StreamPorts
    agent_id: str
    agent: str | None = None

    @property
    def key(self) -> str:
        return inbox_key(self.agent_id)

    def _render(self, note: dict[str, Any], origin: str, seq: int,
                read: bool | None = None) -> Rendered:
        return Rendered(str(note["id"]), [
            ("notify", {"agent_id": self.agent_id, "notification": message_json(note, read=read)}),
            (AGENT_NOTIFIED, agent_notified_json(note, origin=origin, seq=seq)),
        ])

    def live(self, op: Op, now_ms: int) -> Rendered | None:
        expires = op.body.get("expires_at_ms")
        if expires is not None and expires <= now_ms:
            return None
        return self._render(op.body, op.origin, op.seq, read=False)

    async def replay(self, cursor: dict[str, int], after: OrderKey | None,
                     now_ms: int) -> list[Row]:
        return await self.node.store.notes_not_covered(
            self.agent_id, cursor, after=after, limit=limits.stream_replay_page, now_ms=now_ms)

    def replayed(self, row: Row) -> Rendered:
        return self._render(row, row["origin"], row["seq"])

    async def record(self, record_id: str, origin: str, seq: int,
                     now_ms: int) -> Rendered | None:
        """The notification ``record_id`` if it is this agent's and unexpired (an id from
        a Last-Event-ID is the client's word: another agent's is never shown)."""
        rows = await self.node.store.notifications([record_id])
        if not rows or rows[0].get("to") != self.agent_id:
            return None
        expires = rows[0].get("expires_at_ms")
        if expires is not None and expires <= now_ms:
            return None
        return self._render(rows[0], origin, seq)


@dataclass(frozen=True, slots=True)
class MailboxSource:
    """Messages sent to one project's mailbox (event ``message``, or
    ``approval_requested`` while one awaits an approver, and
    ``approval_decided`` for a decision, live only); with ``agent``, only
    those that harness could claim."""

    node: StreamPorts
    workspace: str
    project: str
    agent: str | None = None

    @property
    def key(self) -> str:
        return mailbox_key(self.workspace, self.project)

    def _wrap(self, msg: dict[str, Any]) -> Rendered:
        """Event ``message``; ``approval_requested`` for a message awaiting
        an approver."""
        event = "approval_requested" if msg.get("state") == AWAITING else "message"
        return Rendered(str(msg["id"]), [
            (event, {"workspace": self.workspace, "project": self.project, "message": msg})])

    def _done(self, message_id: str, done: dict[str, Any] | None) -> Rendered:
        return Rendered(message_id, [(MESSAGE_COMPLETE_EVENT, {
            "workspace": self.workspace, "project": self.project, "message_id": message_id,
            "completion": completion_json(done)})])

    def live(self, op: Op, now_ms: int) -> Rendered | None:
        if op.kind == MSG_COMPLETE:
            return self._done(str(op.body["id"]), op.body)
        if op.kind == MSG_EXPIRE:
            b = op.body
            return self._wrap({"id": b.get("id"), "state": PENDING, "to_agent": b.get("to_agent"),
                               "deliveries": b.get("delivery"), "requeued": True})
        if op.kind in DECISION_KINDS:  # live only: a resume replays the message itself
            b = op.body
            return Rendered(str(b.get("id")), [("approval_decided", {
                "workspace": self.workspace, "project": self.project, "id": b.get("id"),
                "decision": "approved" if op.kind == MSG_APPROVE else "rejected",
                "by_user": b.get("by_user"), "reason": b.get("reason")})])
        state = AWAITING if op.body.get("approval_required") else PENDING
        return self._wrap(public_message({**op.body, "state": state}))

    async def replay(self, cursor: dict[str, int], after: OrderKey | None,
                     now_ms: int) -> list[Row]:
        page = limits.stream_replay_page
        sends = await self.node.store.messages_not_covered(
            self.workspace, self.project, cursor, after=after, limit=page, agent=self.agent)
        dones = await self.node.store.completions_not_covered(
            self.workspace, self.project, cursor, after=after, limit=page)
        requeued = await self.node.store.requeues_not_covered(
            self.workspace, self.project, cursor, after=after, limit=page, agent=self.agent)
        rows = sorted([*sends, *dones, *requeued],
                      key=lambda r: (r["hlc"], r["origin"], r["seq"]))
        return rows[:page]  # both pages end at or after this page's end: none skipped

    def replayed(self, row: Row) -> Rendered:
        if row.get("kind") == MSG_COMPLETE:
            return self._done(str(row["id"]), row.get("completion"))
        if row.get("kind") == MSG_EXPIRE:
            return self._wrap({**public_message(row), "requeued": True})
        return self._wrap(public_message(row))

    async def record(self, record_id: str, origin: str, seq: int,
                     now_ms: int) -> Rendered | None:
        return None  # one event per message: nothing is ever owed
