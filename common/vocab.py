"""The words of project mail and reads, each defined once.

Every layer names these the same way (a message's states and the ops that
move it are :mod:`common.lifecycle`'s): the store (rows and SQL), the core
(the owner's mailbox model), the services, the HTTP schemas, the MCP tools
and the CLI import them from here rather than spelling them again. The
enums are ``Literal`` types, so pydantic, the MCP JSON schema and mypy all
read the same definition; the tuple beside each is its values, for
``click.Choice`` and membership tests. Pure data: no imports beyond
``typing``.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

# -- enums -----------------------------------------------------------------------

Nature = Literal["measured", "reported", "inferred", "unknown"]
"""How a sender knows what a message body claims."""
NATURES: Final[tuple[Nature, ...]] = get_args(Nature)
MEASURED: Final[Nature] = "measured"  # the one nature that needs evidence
NATURE_DEFAULT: Final[Nature] = "unknown"
NATURE_MEANINGS: Final[dict[Nature, str]] = {
    "measured": "the sender checked it itself; the evidence says how",
    "reported": "the sender passes on what it was told",
    "inferred": "the sender's own conclusion, not checked",
    "unknown": "the sender did not say how it knows",
}
"""What each nature tells the reader, in the words the CLI and the web inbox show."""

FROM_AGENT_UNNAMED: Final = "other"
"""``from_agent`` of a message whose sender named no harness and had no session naming one."""
FROM_AGENT_UNNAMED_MEANING: Final = (
    "no harness named: sent from the CLI or an MCP client without a session; "
    "the sending project, and its user when keys are on, say who sent it")
FROM_AGENT_WEB: Final = "web"
"""``from_agent`` of a message a person composed in the web inbox."""
FROM_AGENT_MEANINGS: Final[dict[str, str]] = {
    FROM_AGENT_UNNAMED: FROM_AGENT_UNNAMED_MEANING,
    FROM_AGENT_WEB: "composed by a person in the web inbox",
}
"""The ``from_agent`` values that are not a harness, and what they say."""

DECISION_PREFIX: Final = "decision: "
"""The subject prefix of an operator question (project-messaging's convention)."""
DECISION_REPLY_PREFIX: Final = "decision-reply: "
"""The subject prefix of its answer, followed by the question's message id."""

Box = Literal["inbox", "outbox"]
"""Which side of a project's mail a list reads."""
BOXES: Final[tuple[Box, ...]] = get_args(Box)

Consistency = Literal["quorum", "local"]
"""How a read is served: after a read quorum (default) or from this node only."""
CONSISTENCY_DEFAULT: Final[Consistency] = "quorum"
LOCAL: Final[Consistency] = "local"

ScopeSource = Literal["explicit", "session", "shared_slot", "startup_seed", "default",
                      "default_after_mismatch"]
"""How a mail call's project was decided (daemon/services/scope.py)."""
SCOPE_SOURCES: Final[tuple[ScopeSource, ...]] = get_args(ScopeSource)
INFERRED_SOURCES: Final[frozenset[ScopeSource]] = frozenset(
    {"shared_slot", "startup_seed", "default", "default_after_mismatch"})

# -- field lists -------------------------------------------------------------------

SEND_FIELDS: Final = (
    "to_workspace", "to_project", "to_agent", "from_workspace", "from_project", "from_agent",
    "subject", "body", "nature", "evidence", "in_reply_to",
)
"""What a client gives to send a message (HTTP body, MCP arguments, CLI options)."""

MESSAGE_FIELDS: Final = (
    "id", "to_workspace", "to_project", "to_agent", "from_workspace", "from_project",
    "from_agent", "from_owner_user", "subject", "body", "nature", "evidence",
    "created_at_ms", "in_reply_to", "thread_id", "approval_required", "approval_note",
)
"""The body of a ``msg.send`` op, and the message columns of the store.
``in_reply_to`` names the message answered (None: none); ``thread_id`` is
the first message's id (None in a send older than threads: its own id)."""

CLAIMER_FIELDS: Final = ("claimer_session", "claimer_agent")
"""Who popped: carried by ``msg.claim`` and ``msg.empty`` op bodies."""

EMPTY_FIELDS: Final = ("request_id", *CLAIMER_FIELDS, "at_ms")
"""The body of a ``msg.empty`` op (pop ``request_id`` found nothing)."""

NOTE_FIELDS: Final = (
    "id", "from", "to", "namespace", "title", "payload", "priority", "tier",
    "created_at_ms", "expires_at_ms", "in_reply_to", "thread_id",
)
"""The body of a ``note.new`` op, and the notification columns of the store
(``in_reply_to`` and ``thread_id`` as for a message)."""

Result = Literal["done", "blocked", "rejected"]
"""How the holder of a claimed message says it ended (``msg.complete``)."""
RESULTS: Final[tuple[Result, ...]] = get_args(Result)

COMPLETE_FIELDS: Final = (
    "id", "result", "note", "by_session", "by_agent", "by_key", "by_agent_id",
    "from_workspace", "from_project", "at_ms", "token", "claim_epoch",
)
"""The body of a ``msg.complete`` op: the outcome, its note, who completed
(the claim's session, harness, key id and agent id) and the sender project
(so an event reaches the sender without a lookup); for a leased claim the
claim token, and the epoch of the claim it completes (``claim_epoch``: the
completion of the latest claim wins)."""

LEASE_FIELDS: Final = ("token", "lease_ms", "lease_until_ms", "delivery")
"""What a leased ``msg.claim`` (and a ``msg.renew``) carries besides the
claimer: the claim token, the lease's length, its deadline by the owner's
clock, and which delivery of the message this is (1 for the first)."""

CLAIMER_IDS: Final = ("claimer_key", "claimer_agent_id")
"""Who popped, besides :data:`CLAIMER_FIELDS`: the key id (keys mode) and
the caller's agent id, carried by a ``msg.claim`` so that only its holder
completes it."""


def message_body(**fields: Any) -> dict[str, Any]:
    """A ``msg.send`` body, in :data:`MESSAGE_FIELDS` order; TypeError if a
    field is missing or unknown, so a new field cannot be half added."""
    if set(fields) != set(MESSAGE_FIELDS):
        odd = sorted(set(fields) ^ set(MESSAGE_FIELDS))
        raise TypeError(f"a msg.send body has exactly MESSAGE_FIELDS; differs in {odd}")
    return {name: fields[name] for name in MESSAGE_FIELDS}
