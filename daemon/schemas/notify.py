"""Notify and inbox requests, and the notification JSON shapes.

A notify body may name its fields the way the MCP tool does
(``target_agent_id``, ``title``, ``payload``) or the way the SDK's
``NotifyRequest`` does (``to``, ``subject``, ``body``; ``content`` is
accepted too). Giving two aliases of one field with different values is a
400 rather than a silent pick. Inbox rows carry both spellings on the way
out, so either kind of client finds its fields.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Final

from pydantic import AliasChoices, Field, StringConstraints, model_validator

from common import limits
from common.vocab import CONSISTENCY_DEFAULT, Consistency
from daemon.schemas.ids import RECORD_ID_RE
from daemon.schemas.memories import Timestamp
from daemon.schemas.timefmt import rfc3339
from daemon.schemas.validation import AgentId, Lenient, Priority, Strict, Tier, text

_ALIASES: dict[str, tuple[str, ...]] = {
    "target_agent_id": ("target_agent_id", "to"),
    "title": ("title", "subject"),
    "payload": ("payload", "content", "body"),
}

NoteTitle = text(limits.notify_title_max_chars, min_chars=1)
# "*" (every registered agent) or "prefix*" (those whose id starts with prefix)
Broadcast = Annotated[str, StringConstraints(max_length=limits.agent_id_max_chars + 1,
                                             pattern=r"^[A-Za-z0-9_\-:@./]*\*$")]
Recipients = Annotated[list[AgentId], Field(min_length=1, max_length=limits.notify_broadcast_max)]
NotePayload = text(limits.notify_payload_max_chars)
RecordId = Annotated[str, StringConstraints(pattern=RECORD_ID_RE)]


class NotifyRequest(Strict):
    """``target_agent_id`` is one agent id, a list of them, or a broadcast:
    ``"*"`` for every registered agent, ``"prefix*"`` (or ``"*"`` with
    ``target_prefix``) for those whose id starts with the prefix."""

    target_agent_id: AgentId | Recipients | Broadcast | None = Field(
        default=None, validation_alias=AliasChoices(*_ALIASES["target_agent_id"]))
    target_prefix: Annotated[str, StringConstraints(max_length=limits.agent_id_max_chars,
                                                    pattern=r"^[A-Za-z0-9_\-:@./]*$")] | None = None
    title: NoteTitle = Field(validation_alias=AliasChoices(*_ALIASES["title"]))  # type: ignore[valid-type]
    payload: NotePayload = Field(  # type: ignore[valid-type]
        default="", validation_alias=AliasChoices(*_ALIASES["payload"]))
    priority: Priority = limits.notify_priority_default
    tier: Tier = "mid"
    agent_id: AgentId | None = None
    in_reply_to: RecordId | None = None  # a notification the sender may read
    reply_to: RecordId | None = None  # answer that notification's sender (in_reply_to too)

    @model_validator(mode="after")
    def _addressed(self) -> NotifyRequest:
        if self.target_agent_id is None and self.reply_to is None:
            raise ValueError("target_agent_id (or to) is required, unless reply_to names "
                             "the notification to answer")
        if (self.reply_to is not None and self.in_reply_to is not None
                and self.reply_to != self.in_reply_to):
            raise ValueError("reply_to and in_reply_to name different notifications")
        return self

    @model_validator(mode="before")
    @classmethod
    def _aliases_agree(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for names in _ALIASES.values():
                given = {data[n] for n in names if data.get(n) is not None and isinstance(data[n], str)}
                if len(given) > 1:
                    raise ValueError(f"{' / '.join(names)} name the same field and differ")
        return data

    @property
    def broadcast_prefix(self) -> str | None:
        """The agent-id prefix of a broadcast (``""`` for everyone), else None."""
        t = self.target_agent_id
        if isinstance(t, str) and t.endswith("*"):
            return (t[:-1] if t != "*" else (self.target_prefix or ""))
        return None


class InboxQuery(Lenient):
    agent_id: AgentId | None = Field(default=None, validation_alias=AliasChoices("agent_id", "as_agent"))
    unread_only: bool = True
    limit: Annotated[int, Field(ge=1, le=limits.inbox_limit_max)] = limits.inbox_limit_default
    min_priority: Priority | None = None
    since: Timestamp | None = None
    tier: Tier | None = None
    thread_id: RecordId | None = None
    mark_read: bool = False
    consistency: Consistency = CONSISTENCY_DEFAULT


class MarkReadRequest(Strict):
    agent_id: AgentId | None = None
    ids: Annotated[list[RecordId], Field(max_length=limits.mark_read_ids_max)]


class MarkReadQuery(Lenient):
    consistency: Consistency = CONSISTENCY_DEFAULT


def inbox_namespace(agent_id: str) -> str:
    return f"_inbox/{agent_id}"


def notified_json(row: dict[str, Any]) -> dict[str, Any]:
    """What ``POST /notify`` answers about the notification it wrote."""
    return {
        "id": row["id"],
        "notification_id": row["id"],
        "from": row["from"],
        "to": row["to"],
        "delivered_to": row["to"],
        "namespace": row["namespace"],
        "title": row["title"],
        "priority": row["priority"],
        "tier": row["tier"],
        "delivered_at": rfc3339(row["created_at_ms"]),
        "expires_at": rfc3339(row.get("expires_at_ms")),
        "in_reply_to": row.get("in_reply_to"),
        "thread_id": row.get("thread_id") or row["id"],
    }


def message_json(row: dict[str, Any], *, read: bool | None = None) -> dict[str, Any]:
    """One inbox message, in both the MCP and the SDK spelling."""
    created = rfc3339(row["created_at_ms"])
    return {
        "id": row["id"],
        "from": row["from"],
        "to": row["to"],
        "namespace": row.get("namespace"),
        "title": row["title"],
        "subject": row["title"],
        "payload": row["payload"],
        "body": row["payload"],
        "priority": row["priority"],
        "tier": row["tier"],
        "created_at": created,
        "received_at": created,
        "expires_at": rfc3339(row.get("expires_at_ms")),
        "read": bool(row.get("read")) if read is None else read,
        "in_reply_to": row.get("in_reply_to"),
        "thread_id": row.get("thread_id") or row["id"],
    }


AGENT_NOTIFIED: Final = "agent_notified"  # upstream's name for the event of a notification


def content_digest(payload: str) -> str:
    """``sha256:<hex>`` of a notification's body: lets a client check or dedupe what it
    reads back without the event carrying the body."""
    return "sha256:" + hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def agent_notified_json(row: dict[str, Any], *, origin: str, seq: int) -> dict[str, Any]:
    """Upstream's ``agent_notified`` event of one notification: who, from whom, which
    inbox row, when, and a digest of the body; never the title or the body. The
    correlation id is the notification's op id (``origin#seq``, as webhooks' ``change_id``),
    the same on every node and on every replay."""
    return {
        "event": AGENT_NOTIFIED,
        "recipient_agent_id": row["to"],
        "sender_agent_id": row["from"],
        "inbox_row_id": row["id"],
        "correlation_id": f"{origin}#{seq}",
        "namespace": row.get("namespace") or inbox_namespace(str(row["to"])),
        "content_digest": content_digest(str(row.get("payload") or "")),
        "notified_at": rfc3339(row["created_at_ms"]),
    }
