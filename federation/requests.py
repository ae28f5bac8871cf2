"""What a service asks a mailbox's owner: the request types.

Each is a frozen dataclass carrying the mailbox key and, as
``sent_at_ms``, the entry node's clock when the client asked (the owner
refuses a request older than ``limits.mailbox_request_ttl_secs``).
:class:`federation.claim.Claims` serves them; ``daemon/replication/forwarding.py``
codes them for the ``/peer/v1/mailbox`` hop to the owner (a field an
older node does not send takes its default, so fields are only ever
added, with defaults).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common import limits


@dataclass(frozen=True, slots=True)
class MailSend:
    """Queue ``body`` (a full ``msg.send`` body, ``id`` included) unless
    ``cap`` messages are pending. Idempotent by message id."""

    mailbox: str
    body: dict[str, Any]
    cap: int = limits.mailbox_pending_max
    sent_at_ms: int | None = None  # the entry node's clock when the client asked


@dataclass(frozen=True, slots=True)
class MailPop:
    """Claim the oldest pending message ``agent`` may take, or ``message_id``.
    ``claimer`` holds ``claimer_session`` / ``claimer_agent`` for the claim
    record. Retrying with the same ``request_id`` returns the same message,
    or the same "nothing pending". With ``lease_ms`` the claim is leased
    (issue 26): it carries ``token`` (the claim token, chosen by the entry
    node) and a deadline ``lease_ms`` after the owner decides it, and the
    message is pending again unless it is renewed or completed by then."""

    mailbox: str
    request_id: str | None = None
    message_id: str | None = None
    agent: str | None = None
    claimer: dict[str, Any] = field(default_factory=dict)
    sent_at_ms: int | None = None
    lease_ms: int | None = None
    token: str | None = None


@dataclass(frozen=True, slots=True)
class MailRenew:
    """Extend the lease of ``message_id`` held with claim ``token`` to
    ``lease_ms`` from now (None: the claim's own length). Refused (409) once
    the lease ran out by the owner's clock, even on a node that has not yet
    heard of the expiry."""

    mailbox: str
    message_id: str
    token: str
    lease_ms: int | None = None
    sent_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MailComplete:
    """Complete leased ``message_id`` held with claim ``token``: ``body`` is
    the ``msg.complete`` body (result, note, who). Decided by the owner, so
    it never completes a lease that ran out; a completion ends the lease."""

    mailbox: str
    message_id: str
    token: str
    body: dict[str, Any] = field(default_factory=dict)
    sent_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MailExpire:
    """Expire the mailbox's leases that ran out (a node that found one
    overdue in its store sends this, so that a mailbox nobody owns at the
    moment still gets an owner to decide it). Answers the ids expired."""

    mailbox: str
    sent_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MailCancel:
    """Cancel ``message_ids`` (None: every pending message) sent by
    ``by_workspace/by_project``."""

    mailbox: str
    message_ids: tuple[str, ...] | None
    by_workspace: str
    by_project: str
    sent_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MailHold:
    """Take pending ``message_id`` out of the queue for an edit (state
    ``editing``); ``holder`` holds ``holder_session`` / ``holder_agent`` /
    ``holder_user``. Asking again for a message the same session holds
    answers the same hold."""

    mailbox: str
    message_id: str
    holder: dict[str, Any] = field(default_factory=dict)
    sent_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MailRelease:
    """Put edited ``message_id`` back at its place in the queue: with
    ``content`` (the new subject and body, already checked by the caller)
    for a save, without for a discard. Discarding a message that is not held
    answers it as it is. ``holder`` names the releaser (``holder_session``,
    ``holder_user``): only the session or the user that holds the message
    may release it (another gets 409 and the hold stands)."""

    mailbox: str
    message_id: str
    content: dict[str, Any] | None = None
    holder: dict[str, Any] = field(default_factory=dict)
    sent_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MailDecide:
    """Approve (``approve`` True) or reject ``message_id``, which awaits
    approval. ``decider`` holds ``by_user`` / ``by_agent``; ``reason`` is
    optional. Decided once: a message that no longer awaits approval
    answers 409 (with its state and the decision that stands)."""

    mailbox: str
    message_id: str
    approve: bool
    decider: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    sent_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MailPurge:
    """Remove every message of the mailbox sent before this purge, in any
    state (issue 27). ``body`` is the ``msg.purge`` body (``id``: the purge
    id, which makes a retry answer the same purge; ``workspace``,
    ``project``, ``scope``, ``by_user``, ``reason``). The owner issues it
    only once no round of the mailbox is in flight, so no claim is
    acknowledged after the purge is. ``only_if_empty`` (the scheduled
    cleanup): purge nothing, and answer ``purge: None``, if the mailbox
    holds any message."""

    mailbox: str
    body: dict[str, Any]
    only_if_empty: bool = False
    sent_at_ms: int | None = None


MailRequest = (MailSend | MailPop | MailCancel | MailHold | MailRelease | MailDecide
               | MailPurge | MailRenew | MailComplete | MailExpire)
