"""What a push stream shows: the events of one inbox or one mailbox.

A :class:`Source` names the hub key a stream subscribes to, renders an op
the hub offers live, and reads from the store what a resumed stream missed
(rows whose op id the client's cursor does not cover, oldest first, a page
at a time). The HTTP side (:mod:`daemon.api.streams`) writes both in the
same shape, so a client cannot tell a replayed event from a live one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from common import limits
from common.lifecycle import AWAITING, DECISION_KINDS, PENDING
from common.ops import MSG_APPROVE, Op, inbox_key, mailbox_key
from daemon.ports import StreamPorts
from daemon.schemas.notify import message_json
from daemon.services.mail import public_message

Row = dict[str, Any]
OrderKey = tuple[int, str, int]


class Source(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def event(self) -> str: ...
    @property
    def agent(self) -> str | None: ...

    def live(self, op: Op, now_ms: int) -> dict[str, Any] | None: ...
    def event_for(self, data: dict[str, Any]) -> str: ...
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

    def event_for(self, data: dict[str, Any]) -> str:
        return self.event


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
    event: str = "message"

    @property
    def key(self) -> str:
        return mailbox_key(self.workspace, self.project)

    def _wrap(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"workspace": self.workspace, "project": self.project, "message": msg}

    def live(self, op: Op, now_ms: int) -> dict[str, Any] | None:
        if op.kind in DECISION_KINDS:  # live only: a resume replays the message itself
            b = op.body
            return {"workspace": self.workspace, "project": self.project, "id": b.get("id"),
                    "decision": "approved" if op.kind == MSG_APPROVE else "rejected",
                    "by_user": b.get("by_user"), "reason": b.get("reason")}
        state = AWAITING if op.body.get("approval_required") else PENDING
        return self._wrap(public_message({**op.body, "state": state}))

    def event_for(self, data: dict[str, Any]) -> str:
        """``message``; ``approval_requested`` for a message awaiting an
        approver, ``approval_decided`` for an approver's decision."""
        if "decision" in data:
            return "approval_decided"
        if (data.get("message") or {}).get("state") == AWAITING:
            return "approval_requested"
        return self.event

    async def replay(self, cursor: dict[str, int], after: OrderKey | None,
                     now_ms: int) -> list[Row]:
        return await self.node.store.messages_not_covered(
            self.workspace, self.project, cursor, after=after, limit=limits.stream_replay_page,
            agent=self.agent)

    def replayed(self, row: Row) -> dict[str, Any]:
        return self._wrap(public_message(row))
