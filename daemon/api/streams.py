"""HTTP handlers for the push streams (Server-Sent Events).

``GET /api/v1/inbox/stream?agent_id=`` -- an agent's notifications: for
each, event ``notify`` and then upstream's ``agent_notified`` (a digest,
never the body); the caller must be that agent, exactly as for ``GET
/inbox`` (``agent_id`` may be left out: ``X-Agent-Id``, as upstream's
clients send it, or the key's agent names it).

``GET /api/v1/messages/stream?workspace=&project=[&agent=]`` -- mail sent to
a project's mailbox, event ``message`` (``approval_requested`` for a send
held for an approver, ``approval_decided`` when one decides it); allowed to
whoever may list that mailbox (``message.list_inbox`` in :mod:`common.policy`). The project must
be named (or bound by the caller's session) and must exist.

Both: ``Last-Event-ID`` (or ``?last_event_id=`` for clients that cannot set
headers) resumes after the event with that id: the stream first replays
from the store what the id does not cover, on whichever node it reaches,
then goes live. Every stream starts with ``retry:`` and, once replayed, an
event ``ready``; an idle stream gets a comment line every heartbeat; a
stream the node ends (overflow of a slow client, shutdown) gets a last
event ``resume`` whose id is where to resume. The hub and the meaning of
the ids are in :mod:`daemon.http.stream_hub`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiohttp import web

from common import limits
from common.errors import NotFound, QuorumNotMet
from common.policy import check
from daemon.http.appkeys import NODE
from daemon.http.auth import acting_agent, principal_of
from daemon.http.errors import query_model
from daemon.http.stream_hub import (
    HEARTBEAT,
    Owed,
    Subscription,
    decode_event_id,
    encode_event_id,
    merged,
    sse,
)
from daemon.schemas.headers import session_id
from daemon.schemas.validation import AgentId, Lenient, ScopeName
from daemon.services import mail
from daemon.services.scope import refuse_inferred
from daemon.services.streams import InboxSource, MailboxSource, Rendered, Source

_WRITE_CHUNK_BYTES = 64 * 1024  # replayed events are written in pieces about this big


class InboxStreamQuery(Lenient):
    agent_id: AgentId | None = None
    last_event_id: str | None = None


class MailboxStreamQuery(Lenient):
    workspace: ScopeName | None = None
    project: ScopeName | None = None
    agent: ScopeName | None = None
    last_event_id: str | None = None


class _Gone(Exception):
    """The client went away or stopped reading; the stream ends quietly."""


async def inbox_stream(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    q = query_model(request, InboxStreamQuery)
    agent = acting_agent(principal_of(request), q.agent_id)
    assert agent is not None  # required=True raises instead
    return await _stream(request, InboxSource(node, agent), q.last_event_id)


async def mailbox_stream(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    q = query_model(request, MailboxStreamQuery)
    principal = principal_of(request)
    scope = await mail.scope_for(node, q.workspace, q.project, session_id(request), principal)
    refuse_inferred(scope, "stream")
    check(principal, "message.list_inbox", {"box": (scope.workspace, scope.project)})
    if not await mail.project_exists(node, scope.workspace, scope.project):
        raise NotFound(f"project {scope.name} does not exist: a project exists once an "
                           "agent has started a session there", workspace=scope.workspace,
                           project=scope.project)
    source = MailboxSource(node, scope.workspace, scope.project, q.agent)
    return await _stream(request, source, q.last_event_id)


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _stream(request: web.Request, source: Source, query_cursor: str | None) -> web.StreamResponse:
    node = request.app[NODE]
    hub = node.streams
    raw = request.headers.get("Last-Event-ID") or query_cursor
    cursor, owed = decode_event_id(raw) if raw else (None, None)
    sub = hub.open(source.key, agent=source.agent, is_gone=lambda: _gone(request))
    snapshot = hub.watermark()  # same step as open: nothing applied in between
    try:
        if cursor is not None:
            # A resume may land on a node that lacks a write acknowledged
            # elsewhere: hear from a read quorum first (R + W > N). Without
            # one nothing is lost either: such a write reaches this node
            # later and goes out live (it is above the snapshot), just later.
            try:
                await node.read_barrier(source.key)
            except QuorumNotMet:
                node.metrics.inc("stream_resume_barrier_failures_total")
        resp = web.StreamResponse(headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        writer = _Writer(request, resp, sub, hub.settings.write_timeout_secs, node.metrics)
        try:
            await writer.write(f"retry: {limits.stream_retry_ms}\n\n".encode())
            await _run(writer, source, sub, cursor, owed, snapshot, node.now_ms)
        except _Gone:
            pass
        with contextlib.suppress(Exception):
            await resp.write_eof()
        return resp
    finally:
        hub.close(sub)


class _Writer:
    def __init__(self, request: web.Request, resp: web.StreamResponse, sub: Subscription,
                 timeout: float, metrics: Any) -> None:
        self.request, self.resp, self.sub = request, resp, sub
        self.timeout, self.metrics = timeout, metrics

    async def write(self, data: bytes) -> None:
        if self.sub.closed == "gone":
            raise _Gone
        try:
            await asyncio.wait_for(self.resp.write(data), self.timeout)
        except TimeoutError:
            # The client stopped reading: drop it rather than hold its slot.
            self.metrics.inc("stream_write_timeouts_total")
            transport = self.request.transport
            if transport is not None:
                transport.abort()
            raise _Gone from None
        except (ConnectionError, RuntimeError):
            raise _Gone from None
        self.sub.last_write = time.monotonic()


def _events(rendered: Rendered, origin: str, seq: int, pos: dict[str, int],
            skip: int = 0) -> bytes:
    """The SSE text of one record's events from the ``skip``-th on. Each but the last
    carries in its id what is still owed, so a resume from it sends only the rest."""
    out = bytearray()
    last = len(rendered.events) - 1
    for i in range(skip, last + 1):
        name, data = rendered.events[i]
        owed = None if i == last else Owed(origin, seq, rendered.record, i + 1)
        out += sse(name, data, encode_event_id(pos, owed))
    return bytes(out)


async def _replay(w: _Writer, source: Source, sub: Subscription, cursor: dict[str, int],
                  owed: Owed | None, snapshot: dict[str, int], now_ms: Any,
                  pos: dict[str, int], replayed_live: set[tuple[str, int]],
                  partial: dict[tuple[str, int], int]) -> int:
    """Write what ``cursor`` (and ``owed``) does not cover; ``pos``, ``replayed_live``
    and ``partial`` are updated in place. Returns how many records were replayed."""
    if owed is not None:
        rest = None
        if cursor.get(owed.origin, 0) >= owed.seq:  # covered: no replay brings it again
            rest = await source.record(owed.record, owed.origin, owed.seq, now_ms())
        if rest is not None:
            await w.write(_events(rest, owed.origin, owed.seq, pos, owed.done))
        else:  # to come in the replay, or live (a node that has not got it yet)
            partial[(owed.origin, owed.seq)] = owed.done
    count = 0
    after = None
    while not (sub.overflowed or sub.closed):
        rows = await source.replay(cursor, after, now_ms())
        chunk = bytearray()
        for row in rows:
            origin, seq = row["origin"], row["seq"]
            if seq > snapshot.get(origin, 0):
                replayed_live.add((origin, seq))
            # Replay runs in (hlc, origin, seq) order, which within one origin is
            # seq order: every op of this origin up to min(seq, snapshot) is written.
            pos[origin] = max(pos.get(origin, 0), min(seq, snapshot.get(origin, 0)))
            chunk += _events(source.replayed(row), origin, seq, pos,
                             partial.pop((origin, seq), 0))
            count += 1
            if len(chunk) >= _WRITE_CHUNK_BYTES:
                await w.write(bytes(chunk))
                chunk.clear()
        if chunk:
            await w.write(bytes(chunk))
        w.metrics.inc("stream_events_total", len(rows), kind="replay")
        if len(rows) < limits.stream_replay_page:
            break
        last = rows[-1]
        after = (last["hlc"], last["origin"], last["seq"])
    return count


async def _run(w: _Writer, source: Source, sub: Subscription, cursor: dict[str, int] | None,
               owed: Owed | None, snapshot: dict[str, int], now_ms: Any) -> None:
    pos = dict(cursor if cursor is not None else snapshot)
    replayed_live: set[tuple[str, int]] = set()  # replayed ops the hub may still offer live
    # Ops the client already has the first events of: skip those when they come.
    partial: dict[tuple[str, int], int] = {}
    count = 0
    if cursor is not None:
        count = await _replay(w, source, sub, cursor, owed, snapshot, now_ms, pos,
                              replayed_live, partial)
        if not (sub.overflowed or sub.closed):
            pos = merged(pos, snapshot)
    if not (sub.overflowed or sub.closed):
        await w.write(sse("ready", {"replayed": count}, encode_event_id(pos)))
    while True:
        if sub.closed == "gone":
            raise _Gone
        if sub.overflowed or sub.closed:
            reason = "overflow" if sub.overflowed else sub.closed
            await w.write(sse("resume", {
                "reason": reason,
                "hint": "reconnect with Last-Event-ID set to this event's id; nothing is lost"},
                encode_event_id(pos)))
            return
        chunk = bytearray()
        events = 0
        now = now_ms()
        while sub.queue:
            op, mark = sub.take()
            pos = merged(pos, mark)
            if (op.origin, op.seq) in replayed_live:
                replayed_live.discard((op.origin, op.seq))
                continue
            rendered = source.live(op, now)
            if rendered is None:
                continue
            chunk += _events(rendered, op.origin, op.seq, pos,
                             partial.pop((op.origin, op.seq), 0) if partial else 0)
            events += 1
        if sub.heartbeat_due:
            sub.heartbeat_due = False
            if not chunk:
                chunk += HEARTBEAT
        if chunk:
            await w.write(bytes(chunk))
            if events:
                w.metrics.inc("stream_events_total", events, kind="live")
            continue  # more may have arrived while writing
        sub.wake.clear()
        if sub.queue or sub.overflowed or sub.closed or sub.heartbeat_due:
            continue
        await sub.wake.wait()


async def _close_streams(app: web.Application) -> None:
    app[NODE].streams.shutdown()


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/inbox/stream", inbox_stream)
    app.router.add_get("/api/v1/messages/stream", mailbox_stream)
    app.on_shutdown.append(_close_streams)
