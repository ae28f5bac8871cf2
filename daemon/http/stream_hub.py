"""Push streams: the node's live subscriptions to an inbox or a mailbox.

Purpose: ``GET /api/v1/inbox/stream`` and ``GET /api/v1/messages/stream``
(:mod:`daemon.api.streams`) hold a Server-Sent Events response open and
write an event the moment this node applies a notification for that inbox
or a message for that mailbox, whichever node the write came through.

Flow: the hub is one of the runner's ``applied_listeners`` (registered by
:func:`daemon.wiring.build_node` next to webhooks), so it sees every op this
node commits, its own and replicated ones, right after the commit. For each
``note.new`` / ``msg.send`` / ``msg.complete`` it offers the op to the subscriptions of the op's
key (``inbox:<agent>``, ``mbox:<ws>/<project>``). A subscription is a
bounded queue the stream's handler drains into its response.

Event ids (the resume cursor): a per-origin watermark ``{origin: seq}``,
meaning "every inbox (mailbox) op whose seq is at most this, per origin,
has been written to this stream". The hub keeps its own
:class:`store.seen.SeenSet` of the ops it has been shown (seeded from the
store at build), so a watermark it reports covers only ops whose listener
ran, and the queue of every subscription then open got them. An event
carries the watermark as of its op (ops later in the same batch are not
covered), merged with the cursor the stream resumed from. Origins number
their ops without gaps and an op id never changes, so the cursor means the
same on every node: a client may resume on any member. Ops held past a gap
are not covered yet and come again on a resume (a duplicate, never a miss).
An op may show as more than one event (a notification is our ``notify``
and upstream's ``agent_notified``): every event but the op's last carries,
after the cursor, what is still owed (:class:`Owed`: the op, its record and
how many of its events were written), so a client that resumes from the
first event gets the rest of that op and nothing twice.

Guarantees and bounds: a stream's queue holds at most ``queue_max`` events
and ``queue_bytes_max`` of their text (so a node holds at most
``max * queue_bytes_max`` of queued events, 256 MiB by default);
an overflow ends the stream with a ``resume`` event carrying the id of the
last event written, so the client resumes and replays what it lost. At most
``max_streams`` streams per node (beyond: 503 with Retry-After). A reaper
looks every ``limits.stream_disconnect_poll_secs`` for streams whose client
hung up and frees their slot; it also wakes idle streams for heartbeats.

=========================  ==============================  ================
setting ([streams])        limit default                   what it bounds
=========================  ==============================  ================
``max``                    ``limits.streams_max``          open streams
``queue_max``              ``limits.stream_queue_max``     events per stream
``queue_bytes_max``        ``limits.stream_queue_bytes_max`` their text, summed
``heartbeat_secs``         ``limits.stream_heartbeat_secs`` idle comment line
``write_timeout_secs``     ``limits.stream_write_timeout_secs`` one write
=========================  ==============================  ================
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common import limits
from common.errors import BadRequest, Unavailable
from common.ops import (
    MSG_APPROVE,
    MSG_COMPLETE,
    MSG_EXPIRE,
    MSG_REJECT,
    MSG_SEND,
    NOTE_NEW,
    Op,
)
from daemon.runtime.metrics import Metrics
from store.seen import SeenSet

log = logging.getLogger("ai_memory.streams")

STREAMED_KINDS = frozenset({NOTE_NEW, MSG_SEND, MSG_COMPLETE, MSG_APPROVE, MSG_REJECT,
                            MSG_EXPIRE})
CURSOR_PREFIX = "v1."


@dataclass(frozen=True, slots=True)
class StreamSettings:
    max: int = limits.streams_max
    queue_max: int = limits.stream_queue_max
    queue_bytes_max: int = limits.stream_queue_bytes_max
    heartbeat_secs: float = limits.stream_heartbeat_secs
    write_timeout_secs: float = limits.stream_write_timeout_secs

    def __post_init__(self) -> None:
        if self.max < 0 or self.queue_max < 1 or self.queue_bytes_max < 1 \
                or self.heartbeat_secs <= 0 or self.write_timeout_secs <= 0:
            raise BadRequest("[streams]: max >= 0, queue_max and queue_bytes_max >= 1, "
                             "heartbeat_secs and write_timeout_secs > 0")


# -- cursors --------------------------------------------------------------------

def encode_cursor(cursor: dict[str, int]) -> str:
    raw = json.dumps({o: s for o, s in sorted(cursor.items()) if s > 0},
                     separators=(",", ":")).encode()
    return CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(value: str) -> dict[str, int]:
    """A Last-Event-ID back into its watermarks; 400 for anything else."""
    if len(value) > limits.stream_cursor_max_chars:
        raise BadRequest(f"Last-Event-ID over {limits.stream_cursor_max_chars} characters "
                         "(limits.stream_cursor_max_chars)", code="bad_last_event_id")
    bad = BadRequest("Last-Event-ID is not an event id this API sent", code="bad_last_event_id")
    if not value.startswith(CURSOR_PREFIX):
        raise bad
    body = value[len(CURSOR_PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError):
        raise bad from None
    if not isinstance(data, dict) or len(data) > limits.stream_cursor_origins_max:
        raise bad
    out: dict[str, int] = {}
    for origin, seq in data.items():
        if not isinstance(origin, str) or not origin or type(seq) is not int or seq < 0:
            raise bad
        out[origin] = seq
    return out


@dataclass(frozen=True, slots=True)
class Owed:
    """Part of an event id: of the op ``origin``/``seq`` (whose record is ``record``), the
    first ``done`` of its events were written and the rest are still owed."""

    origin: str
    seq: int
    record: str
    done: int


def encode_event_id(cursor: dict[str, int], owed: Owed | None = None) -> str:
    """An event id: the cursor, and for an event that is not its op's last, what is owed."""
    base = encode_cursor(cursor)
    if owed is None:
        return base
    raw = json.dumps([owed.origin, owed.seq, owed.record, owed.done], separators=(",", ":"))
    return base + "." + base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_event_id(value: str) -> tuple[dict[str, int], Owed | None]:
    """A Last-Event-ID back into its cursor and what it owes; 400 for anything else."""
    head, dot, tail = value.rpartition(".")
    if not dot or head + "." == CURSOR_PREFIX:
        return decode_cursor(value), None
    cursor = decode_cursor(head)
    bad = BadRequest("Last-Event-ID is not an event id this API sent", code="bad_last_event_id")
    try:
        data = json.loads(base64.urlsafe_b64decode(tail + "=" * (-len(tail) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    if not (isinstance(data, list) and len(data) == 4):
        raise bad
    origin, seq, record, done = data
    if not (isinstance(origin, str) and origin and type(seq) is int and seq > 0
            and isinstance(record, str) and 0 < len(record) <= limits.stream_owed_record_max_chars
            and type(done) is int and done > 0):
        raise bad
    return cursor, Owed(origin, seq, record, done)


def merged(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for origin, seq in b.items():
        if seq > out.get(origin, 0):
            out[origin] = seq
    return out


# -- subscriptions ----------------------------------------------------------------

@dataclass(eq=False, slots=True)
class Subscription:
    """One open stream: what it listens to and the events waiting for it."""

    key: str
    agent: str | None  # mailbox streams: only mail this harness could claim
    queue_max: int
    queue_bytes_max: int
    is_gone: Callable[[], bool]  # True once the client's connection is closed
    queue: deque[tuple[Op, dict[str, int], int]] = field(default_factory=deque)
    queued_bytes: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False
    closed: str | None = None  # why the hub ended it: "gone", "shutdown"
    last_write: float = field(default_factory=time.monotonic)
    heartbeat_due: bool = False

    def wants(self, op: Op) -> bool:
        if self.agent is None or op.kind not in (MSG_SEND, MSG_EXPIRE):
            return True
        to_agent = op.body.get("to_agent")
        return to_agent is None or to_agent == self.agent

    def offer(self, op: Op, mark: dict[str, int], size: int) -> bool:
        """Queue one event; False (and the stream marked) when it is full."""
        if self.overflowed:
            return False
        if len(self.queue) >= self.queue_max or self.queued_bytes + size > self.queue_bytes_max:
            self.overflowed = True
            self.queue.clear()  # the client replays them after its resume
            self.queued_bytes = 0
            self.wake.set()
            return False
        self.queue.append((op, mark, size))
        self.queued_bytes += size
        self.wake.set()
        return True

    def take(self) -> tuple[Op, dict[str, int]]:
        op, mark, size = self.queue.popleft()
        self.queued_bytes -= size
        return op, mark


class StreamHub:
    def __init__(self, seen: SeenSet, settings: StreamSettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._seen = seen
        self._by_key: dict[str, set[Subscription]] = {}
        self._all: set[Subscription] = set()
        self._reaper: asyncio.Task[None] | None = None
        self.stopping = False
        metrics.gauge("streams_open", lambda: float(len(self._all)))

    # -- the applied-ops listener -----------------------------------------------
    def on_applied(self, ops: list[Op]) -> None:
        seen = self._seen
        for op in ops:
            mark_now = seen.watermark.get(op.origin, 0)
            if op.seq == mark_now + 1 and op.origin not in seen.held:
                seen.watermark[op.origin] = op.seq  # the usual case, without SeenSet's copies
            elif op.seq > mark_now:
                seen.add(op.origin, op.seq)
            if op.kind not in STREAMED_KINDS:
                continue
            subs = self._by_key.get(op.key)
            if not subs:
                continue
            mark: dict[str, int] | None = None
            size = _text_size(op)
            for sub in subs:
                if not sub.wants(op):
                    continue
                if mark is None:
                    mark = seen.version_vector()
                if not sub.offer(op, mark, size):
                    self.metrics.inc("stream_overflows_total")

    def watermark(self) -> dict[str, int]:
        """What every stream opened now has been shown: the hub's watermarks."""
        return self._seen.version_vector()

    # -- opening and closing -----------------------------------------------------
    def open(self, key: str, *, agent: str | None, is_gone: Callable[[], bool]) -> Subscription:
        """Register a stream (synchronously, so no op slips between this and
        :meth:`watermark`); 503 when every slot is taken or the node stops."""
        if self.stopping:
            raise Unavailable("node shutting down", retry_after=limits.stream_refused_retry_after_secs)
        if len(self._all) >= self.settings.max:
            self.metrics.inc("streams_refused_total")
            raise Unavailable(
                f"this node already holds {self.settings.max} streams (limits.streams_max); "
                "retry later or use another node",
                retry_after=limits.stream_refused_retry_after_secs, limit="streams_max")
        sub = Subscription(key, agent, self.settings.queue_max, self.settings.queue_bytes_max,
                           is_gone)
        self._by_key.setdefault(key, set()).add(sub)
        self._all.add(sub)
        self._ensure_reaper()
        return sub

    def close(self, sub: Subscription) -> None:
        self._all.discard(sub)
        subs = self._by_key.get(sub.key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._by_key[sub.key]

    def count(self) -> int:
        return len(self._all)

    def shutdown(self) -> None:
        """End every stream (each writes a final resume event) and refuse new ones."""
        self.stopping = True
        for sub in list(self._all):
            sub.closed = "shutdown"
            sub.wake.set()
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None

    # -- the reaper: disconnects and heartbeats ------------------------------------
    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        while self._all:
            await asyncio.sleep(limits.stream_disconnect_poll_secs)
            now = time.monotonic()
            for sub in list(self._all):
                try:
                    gone = sub.is_gone()
                except Exception:  # a transport in an odd state counts as gone
                    gone = True
                if gone:
                    sub.closed = "gone"
                    self.close(sub)  # the slot is free now, not when the handler wakes
                    sub.wake.set()
                elif now - sub.last_write >= self.settings.heartbeat_secs:
                    sub.heartbeat_due = True
                    sub.wake.set()


def _text_size(op: Op) -> int:
    """Roughly what an event of ``op`` costs to hold: its text, plus a little."""
    return 256 + sum(len(v) for v in op.body.values() if isinstance(v, str))


def sse(event: str | None, data: Any, event_id: str | None = None) -> bytes:
    """One Server-Sent Event (data is JSON on one line)."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return ("\n".join(lines) + "\n\n").encode()


HEARTBEAT = b": heartbeat\n\n"


__all__ = ["HEARTBEAT", "Owed", "StreamHub", "StreamSettings", "Subscription", "decode_cursor",
           "decode_event_id", "encode_cursor", "encode_event_id", "merged", "sse"]
