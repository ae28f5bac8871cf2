"""Operations: the unit of change, of replication and of anti-entropy.

Every change to replicated state is an :class:`Op` with a stable id
``(origin, seq)`` -- the node that created it and that node's own counter,
starting at 1 and without gaps -- and a hybrid-logical-clock stamp ``hlc``
(see :mod:`federation.hlc`). Ops are applied by :mod:`store` with merge
rules that make application idempotent and order-free:

==============  ===========================================================
kind            body fields and merge rule
==============  ===========================================================
mem.put         id, title, content, tier, namespace, tags, priority,
                confidence, source, metadata, agent_id, created_at_ms,
                expires_at_ms. Whole-record last-writer-wins on
                (hlc, origin); ignored once the memory is tombstoned.
mem.del         id. Tombstone; deleted never flips back.
note.new        id, from, to, namespace, title, payload, priority, tier,
                created_at_ms, expires_at_ms, in_reply_to, thread_id.
                Inserted once, immutable.
note.read       to, ids. Read marks; read never flips back. A mark may
                arrive before its notification and must still take effect.
agent.reg       agent_id, agent_type, capabilities, registered_at_ms.
                type/capabilities last-writer-wins; registered_at = min.
agent.seen      agent_id, at_ms. last_seen_at = max.
session.start   workspace, project, harness, session_id, owner_user, at_ms.
                The project exists from then on (monotone); the session row
                keeps the max at_ms.
msg.send        id, to_workspace, to_project, to_agent, from_workspace,
                from_project, from_agent, from_owner_user, subject, body,
                nature, evidence, created_at_ms, in_reply_to, thread_id,
                approval_required, approval_note. Inserted once. Mailbox
                order (FIFO) is (hlc, origin) of this op.
                ``approval_required``: an admission decider answered
                pending (the message awaits an approver; ``approval_note``
                is the decider's reason).
msg.claim       id, claimer_session, claimer_agent, claimer_key,
                claimer_agent_id, request_id, at_ms; a leased claim also
                token (the claim token), lease_ms, lease_until_ms (the
                owner's clock) and delivery (1, then one more per expiry).
msg.renew       the claim's whole body with a later lease_until_ms and
                renewed_at_ms: a leased claim's holder extends it. Ranked
                with the terminal ops (it decides the holder as a claim).
msg.expire      id, token, at_ms, delivery, to_agent (the expired claim's
                delivery, the message's agent: for the push streams). The
                owner ends a lease that ran out; the
                message is pending again at its place. Ranked with the
                holds.
msg.cancel      id, by_workspace, by_project, at_ms.
msg.hold        id, holder_session, holder_agent, holder_user, at_ms. Takes a
                pending message out of the queue for an edit (``editing``).
msg.release     id, at_ms, content (None: discard; else the saved subject
                and body). Puts an edited message back at its place.
msg.approve     id, by_user, by_agent, reason, at_ms. An approver lets a
                message awaiting approval into the queue at its place;
                ranked with holds and releases.
msg.reject      id, by_user, by_agent, reason, at_ms. An approver refuses
                a message awaiting approval; terminal (``rejected``),
                ranked with claims and cancels.
                Holds and releases: the greatest (epoch, hlc, origin, seq)
                decides, and any terminal op outranks them all
                (:mod:`common.lifecycle` is the table of states).
msg.complete    id, result, note, by_session, by_agent, by_key, by_agent_id,
                from_workspace, from_project, at_ms, token, claim_epoch.
                The outcome of a claimed message: a terminal claim's is
                written by quorum, a leased claim's by the owner. Per
                message the greatest claim_epoch (the epoch of the claim
                it completes), then the lowest (hlc, origin, seq) is kept,
                so the first completion of the latest claim wins
                everywhere; shown only while the message is claimed by the
                token it names (None for a terminal claim).
op.gap          (no fields). Stands in for an op id that was lost with a
                member's disk before any other member held it, so every
                version vector can move past it. Changes no state.
msg.empty       request_id, claimer_session, claimer_agent, at_ms. The
                owner's decision that pop ``request_id`` found nothing to
                claim. Per (mailbox, request id) the greatest
                ``(epoch, hlc, origin, seq)`` is kept; local rows older
                than ``limits.pop_empty_keep_secs`` are purged.
link.put        source_id, target_id, relation, created_at_ms. A grow-only
                set keyed by (source_id, target_id, relation); created_at =
                min. Links outlive a deleted endpoint (lineage shows
                tombstoned ancestors).
grant.put       memory_id, agent_id, permission, granted. Per-memory sharing,
                last-writer-wins per (memory_id, agent_id); a revoke is a
                grant.put with granted = false.
nsub.put        agent_id, namespace, active, at_ms. An agent's subscription
                to a namespace (upstream's namespace shape of
                /subscriptions), last-writer-wins per (agent_id, namespace);
                an unsubscribe is a put with active = false.
user.put        name, root, password_hash, removed, created_at_ms. A user
                (issue 7): root and password hash last-writer-wins;
                removed never flips back (a removed name stays removed);
                created_at = min.
apikey.put      id, user, agent, label, hash, created_at_ms, revoked. An API
                key (only the sha256 of its secret): the identity fields are
                insert-once (the lowest-ranked op wins); revoked never flips
                back. A revocation is an apikey.put with revoked = true.
msg.purge      id, workspace, project, scope, by_user, reason, at_ms. An
                explicit purge of one project's mailbox (issue 27), issued by
                the mailbox's owner at its epoch like a claim. Per mailbox the
                greatest (epoch, hlc, origin, seq) is the *mark*: every
                message of that mailbox whose winning send (the latest owner
                term's copy) ranks below the mark is gone (row and body,
                and every hold, saved edit and approval decision
                ranked below the mark, of any message of the mailbox: one
                ranked above stays, hidden while its message is purged; its id stays
                as a purged tombstone with the rank and epoch of the copy
                that was purged, so a late copy of it never comes back, a
                later term's copy is judged again). Terminal ops stay (a
                pop's request id stays decided). Sessions and harness rows of the project whose
                latest activity (``last_at_ms``) is before the greatest
                ``at_ms`` of its purges are hidden from every read; the
                project exists again once a session starts after that.
proj.hide       id, workspace, project, at_ms. A purge's hiding of a project,
                for a node with lanes (docs/lanes.md): the ``msg.purge``
                stays with the project's mailbox, on its lane; this copy,
                kept by every lane, hides the project's sessions and
                harness rows last active before ``at_ms`` there too (as a
                purge of that ``at_ms`` would; nothing else).
pgrant.put      user, workspace, project, access, granted, at_ms. A project
                grant (project None: the whole workspace; access read or
                write), last-writer-wins per (user, workspace, project); a
                revoke is a put with granted = false.
==============  ===========================================================

A message's state: pending until any terminal op (claim or cancel) is
known; then the terminal op with the greatest ``(epoch, hlc, origin)``
decides it. A pop's request id is decided once too: by the greatest-ranked
of the claims that carry it and the ``msg.empty`` ops that name it. Only an owner holding ``epoch`` issues mailbox ops, and a claim
is acknowledged only once a majority accepted it at that epoch, so an
acknowledged terminal op is never outranked (docs/federation.md).

``key`` groups ops for targeted pulls: ``mem:<id>`` (links by their source,
grants by their memory), ``inbox:<agent>``, ``agent:<id>``,
``proj:<ws>/<project>``, ``mbox:<ws>/<project>``, and :data:`IDENT_KEY` for
every user, key and grant (one pull fetches the whole directory). A pull for
:data:`ALL_KEYS` asks for every op the caller lacks (a read that spans
records, such as a search).

Kinds from a newer version: :meth:`Op.from_wire` accepts any well-formed
kind name (``limits.op_kind_max_chars``, lower-case dotted), so a batch from
a newer peer never fails because one op is of a kind this version lacks.
Such an op is logged and replicated like any other but not applied: the
store keeps it aside (:mod:`store.deferred`) and applies it once a later
version that knows the kind opens the database. :func:`known_kind` says
which kinds this build applies; :func:`register_kind` adds one (a newer
build, or a test standing in for one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from common import lifecycle, limits

MEM_PUT: Final = "mem.put"
MEM_DEL: Final = "mem.del"
NOTE_NEW: Final = "note.new"
NOTE_READ: Final = "note.read"
AGENT_REG: Final = "agent.reg"
AGENT_SEEN: Final = "agent.seen"
SESSION_START: Final = "session.start"
MSG_SEND: Final = lifecycle.MSG_SEND
MSG_CLAIM: Final = lifecycle.MSG_CLAIM
MSG_CANCEL: Final = lifecycle.MSG_CANCEL
MSG_HOLD: Final = lifecycle.MSG_HOLD
MSG_RELEASE: Final = lifecycle.MSG_RELEASE
MSG_COMPLETE: Final = lifecycle.MSG_COMPLETE
MSG_APPROVE: Final = lifecycle.MSG_APPROVE
MSG_REJECT: Final = lifecycle.MSG_REJECT
MSG_RENEW: Final = lifecycle.MSG_RENEW
MSG_EXPIRE: Final = lifecycle.MSG_EXPIRE
MSG_EMPTY: Final = "msg.empty"
MSG_PURGE: Final = "msg.purge"
PROJ_HIDE: Final = "proj.hide"
OP_GAP: Final = "op.gap"  # fills an op id lost with a member's disk; changes no state
LINK_PUT: Final = "link.put"
GRANT_PUT: Final = "grant.put"
NSUB_PUT: Final = "nsub.put"
USER_PUT: Final = "user.put"
APIKEY_PUT: Final = "apikey.put"
PGRANT_PUT: Final = "pgrant.put"

KINDS: Final = frozenset(
    {MEM_PUT, MEM_DEL, NOTE_NEW, NOTE_READ, AGENT_REG, AGENT_SEEN, SESSION_START,
     MSG_SEND, MSG_CLAIM, MSG_CANCEL, MSG_HOLD, MSG_RELEASE, MSG_APPROVE, MSG_REJECT,
     MSG_EMPTY, MSG_COMPLETE, MSG_PURGE, PROJ_HIDE, MSG_RENEW, MSG_EXPIRE, LINK_PUT, GRANT_PUT,
     NSUB_PUT, USER_PUT, APIKEY_PUT, PGRANT_PUT, OP_GAP}
)
_KIND_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
_registered: set[str] = set(KINDS)


def known_kind(kind: str) -> bool:
    """True if this build applies ops of ``kind``."""
    return kind in _registered


def register_kind(kind: str) -> None:
    """Teach this process a kind (the apply rule goes to store.apply.register)."""
    if not valid_kind_name(kind):
        raise ValueError(f"bad op kind name {kind!r}")
    _registered.add(kind)


def valid_kind_name(kind: object) -> bool:
    return (isinstance(kind, str) and len(kind) <= limits.op_kind_max_chars
            and _KIND_NAME.fullmatch(kind) is not None)



MAILBOX_KINDS: Final = frozenset(
    {MSG_SEND, MSG_CLAIM, MSG_CANCEL, MSG_HOLD, MSG_RELEASE, MSG_APPROVE, MSG_REJECT,
     MSG_EMPTY, MSG_PURGE, MSG_RENEW, MSG_EXPIRE})
TERMINAL_KINDS: Final = lifecycle.TERMINAL_KINDS
HOLD_KINDS: Final = lifecycle.HOLD_KINDS
ALL_KEYS: Final = "*"
IDENT_KEY: Final = "ident:dir"
IDENTITY_KINDS: Final = frozenset({USER_PUT, APIKEY_PUT, PGRANT_PUT})


def mem_key(memory_id: str) -> str:
    return f"mem:{memory_id}"


def inbox_key(agent_id: str) -> str:
    return f"inbox:{agent_id}"


def agent_key(agent_id: str) -> str:
    return f"agent:{agent_id}"


def project_key(workspace: str, project: str) -> str:
    return f"proj:{workspace}/{project}"


def mailbox_key(workspace: str, project: str) -> str:
    return f"mbox:{workspace}/{project}"


@dataclass(frozen=True, slots=True)
class Op:
    origin: str
    seq: int
    hlc: int
    kind: str
    key: str
    body: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0

    @property
    def op_id(self) -> tuple[str, int]:
        return (self.origin, self.seq)

    @property
    def rank(self) -> tuple[int, int, str]:
        """Order of terminal mailbox ops: greater rank wins."""
        return (self.epoch, self.hlc, self.origin)

    def to_wire(self) -> list[Any]:
        return [self.origin, self.seq, self.hlc, self.kind, self.key, self.epoch, self.body]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> Op:
        origin, seq, hlc, kind, key, epoch, body = raw
        if not valid_kind_name(kind):  # unknown but well-formed kinds are kept (see above)
            raise ValueError(f"malformed op kind {kind!r}")
        return cls(origin=origin, seq=int(seq), hlc=int(hlc), kind=kind, key=key,
                   body=dict(body), epoch=int(epoch))


def pack_body(body: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


OP_FRAME_BYTES = 64  # what an op costs on the wire besides its key and body


def op_weight(key_bytes: int, body_bytes: int) -> int:
    """The bytes an op of this key and packed body adds to a peer batch
    (approximately: what ``limits.peer_batch_bytes_max`` is counted in)."""
    return OP_FRAME_BYTES + key_bytes + body_bytes


def unpack_body(raw: bytes) -> dict[str, Any]:
    out = msgpack.unpackb(raw, raw=False)
    if not isinstance(out, dict):
        raise ValueError("op body is not a map")
    return out
