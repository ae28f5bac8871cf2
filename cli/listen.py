"""``ai-memory listen``: follow an inbox and/or a mailbox, one command per event.

A long-running client of the push streams (:mod:`cli.stream` reads them):
one thread per stream (``/api/v1/inbox/stream`` for ``--inbox``,
``/api/v1/messages/stream`` for ``--mail``) follows it on one of the nodes
given (``--url`` once per node or comma-separated; without it, the members
of the cluster at the global ``--url``). A stream that ends or a node that
stops answering sends the thread to the next node, resuming with
``Last-Event-ID``: the cursor means the same on every member.

Each ``notify`` / ``message`` event is handled once: ``--exec CMD`` runs CMD
(:mod:`cli.listen_exec`: JSON on stdin, fields in the environment, at most
``--concurrency`` at once, ``--timeout``, ``--retries``, then a dead-letter
line), ``--json`` prints it as one line on stdout. With ``--claim`` a mail
event is first popped (claimed) by its id; one that another listener
claimed first is skipped. Events are finished in any order; the state file
(:mod:`cli.listen_state`) keeps the cursor of the finished prefix and the
ids of finished events, so a restart resumes where the listener was, and an
event the stream sends again (after a restart, a failover) is dropped.

The rule for an event: it is finished when its command succeeded, or when
every run failed and the dead-letter line is on disk; only then may the
cursor pass it. A listener killed before that runs it again on its next
start (at least once; twice only if killed between a command's exit and the
state file's write, a window of one fsync). On first start a stream begins
at the moment it connects: what was sent before is not replayed.

SIGTERM or SIGINT stops reading, lets the running commands finish (each
bounded by ``--timeout``), saves the state and exits 0.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from cli.client import ApiClient, drop_none
from cli.listen_exec import DeadLetters, RunSettings, run_command
from cli.listen_state import Entry, ListenState
from cli.node_urls import node_urls
from cli.output import note
from cli.scope import Scope, resolve_scope
from cli.state import CliState, pass_state
from cli.stream import Event, _Stream
from common import limits
from common.errors import AiMemoryError, Conflict, Unavailable
from common.lifecycle import EDITING

# Events whose id the listener follows besides its own kind: the stream's
# ``ready`` and ``resume``, and an id without data. Any other event a stream
# may carry (a new kind, or one for other clients) is passed over, id and
# all: its id could cover an event of ours not yet read.
CURSOR_EVENTS = ("ready", "resume", "")


class _Stopped(Exception):
    """The listener is stopping: leave this event unfinished (it runs on the next start)."""


@dataclass(frozen=True, slots=True)
class Feed:
    """One stream the listener follows."""

    key: str  # the state file's name for it: inbox:<agent>, mbox:<ws>/<project>
    path: str
    params: dict[str, str]
    event: str  # notify | message


@dataclass(slots=True)
class Listener:
    state: ListenState
    urls: tuple[str, ...]
    make_client: Callable[[str], ApiClient]
    run: RunSettings | None
    dead: DeadLetters
    as_json: bool
    claim: bool
    scope: Scope | None
    concurrency: int
    harness: str | None = None
    lease_secs: float | None = None  # --claim --lease: claim for a lease, renew, complete
    stop: threading.Event = field(default_factory=threading.Event)
    fatal: list[AiMemoryError] = field(default_factory=list)
    in_flight: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url_at: int = 0

    # -- following a stream, across nodes -----------------------------------------
    def follow(self, feed: Feed, pool: ThreadPoolExecutor, slots: threading.Semaphore) -> None:
        last_id = self.state.cursor(feed.key)
        failures = 0
        at = self.url_at
        while not self.stop.is_set():
            url = self.urls[at % len(self.urls)]
            stream: _Stream | None = None
            try:
                stream = _Stream(self.make_client(url), feed.path, feed.params, last_id,
                                 limits.listen_connect_timeout_secs)
                note(f"listen: following {feed.key} on {url}")
                failures = 0
                self.url_at = at
                for ev in stream.events(lambda: limits.cli_wait_read_secs):
                    if self.stop.is_set():
                        return
                    if ev.event not in (feed.event, *CURSOR_EVENTS):
                        continue  # another kind of event: its id is not ours to follow
                    self._arrived(feed, ev, pool, slots)
                    if ev.id is not None:
                        last_id = ev.id
                retry = stream.retry_secs  # the node ended it (a resume, a restart)
            except _StreamStop:
                return
            except Unavailable as exc:
                retry, at, failures = self._next_node(feed, url, exc.message, at, failures)
            except AiMemoryError as exc:  # refused (bad key, no such project): say so, stop
                self.fatal.append(exc)
                self.stop.set()
                return
            except (OSError, http.client.HTTPException) as exc:
                retry, at, failures = self._next_node(feed, url, str(exc) or type(exc).__name__,
                                                      at, failures)
            finally:
                if stream is not None:
                    stream.close()
            self.stop.wait(retry)

    def _next_node(self, feed: Feed, url: str, why: str, at: int,
                   failures: int) -> tuple[float, int, int]:
        failures += 1
        wait = 0.0
        if failures % len(self.urls) == 0:  # every node tried: back off
            rounds = failures // len(self.urls)
            wait = min(limits.listen_reconnect_wait_max_secs, 0.2 * 2.0 ** rounds)
        note(f"listen: {feed.key} on {url}: {why}; trying "
             f"{self.urls[(at + 1) % len(self.urls)]}" + (f" in {wait:g}s" if wait else ""))
        return wait, at + 1, failures

    def _arrived(self, feed: Feed, ev: Event, pool: ThreadPoolExecutor,
                 slots: threading.Semaphore) -> None:
        entry = self.state.arrive(feed.key, ev.id)
        item = _item(ev.data, feed.event) if ev.event == feed.event else None
        item_id = item.get("id") if item else None
        if not isinstance(item_id, str):
            self.state.finish(feed.key, entry)  # ready, resume: only a cursor
            return
        key = f"{feed.event}:{item_id}"
        if item and item.get("deliveries"):  # back in the queue after a lease ran out
            key += f"#{item['deliveries']}"
        with self.lock:
            repeat = key in self.in_flight or self.state.was_handled(key)
            if not repeat:
                self.in_flight.add(key)
        if repeat:
            self.state.finish(feed.key, entry)
            return
        while not slots.acquire(timeout=0.5):
            if self.stop.is_set():
                raise _StreamStop
        event = {"event": feed.event, "id": item_id, "stream": feed.key,
                 "cursor": ev.id, "data": ev.data}
        try:
            pool.submit(self._handle, feed, event, entry, key, slots)
        except RuntimeError:  # the pool is shutting down: leave it for the next start
            slots.release()
            with self.lock:
                self.in_flight.discard(key)
            raise _StreamStop from None

    # -- one event ---------------------------------------------------------------
    def _handle(self, feed: Feed, event: dict[str, Any], entry: Entry, key: str,
                slots: threading.Semaphore) -> None:
        claimed_id: str | None = None
        lease: _Lease | None = None
        try:
            if self.claim and feed.event == "message":
                claimed_id = event["id"]
                popped = self._claim(event["id"])
                if popped is None:
                    note(f"listen: message {claimed_id} was claimed by another session (or "
                         "cancelled); skipped")
                    self.state.finish(feed.key, entry, key, claimed=claimed_id)
                    return
                event = {**event, "claimed": popped}
            lease = self._lease(event) if self.lease_secs is not None else None
            if self.as_json:
                with self.lock:
                    sys.stdout.write(json.dumps(event, ensure_ascii=False) + "\n")
                    sys.stdout.flush()
            if self.run is not None:
                outcome = run_command(self.run, event, stop=self.stop, note=note)
                if not outcome.ok:
                    if self.stop.is_set():
                        raise _Stopped
                    self.dead.add(event, outcome)
                    note(f"listen: command for {feed.event} {event['id']} failed after "
                         f"{outcome.attempts} run(s) ({outcome.status}); written to "
                         f"{self.dead.path}")
                if lease is not None:
                    lease.finish("done" if outcome.ok else "blocked",
                                 None if outcome.ok else f"command failed: {outcome.status}")
            elif lease is not None:
                lease.finish("done", None)
            self.state.finish(feed.key, entry, key, claimed=claimed_id)
        except (_Stopped, _StreamStop):
            pass  # unfinished: the cursor stays before it, the next start runs it
            # (a leased claim left unfinished runs out and is handed out again)
        except Exception as exc:  # a thread must say why it gave up
            note(f"listen: {feed.event} {event.get('id')} left unfinished: {exc}")
            if isinstance(exc, AiMemoryError) and not exc.retryable:
                self.fatal.append(exc)
            self.stop.set()
        finally:
            if lease is not None:
                lease.stop()
            with self.lock:
                self.in_flight.discard(key)
            slots.release()

    def _lease(self, event: dict[str, Any]) -> _Lease:
        claimed = (event.get("claimed") or {}).get("message") or {}
        lease = _Lease(self, str(event["id"]), str(claimed.get("claim_token")),
                       float(claimed.get("lease_seconds") or self.lease_secs or 0))
        lease.start()
        return lease

    def _claim(self, message_id: str) -> dict[str, Any] | None:
        """Pop ``message_id`` (see :mod:`cli.listen_state` for the saved request ids)."""
        for rid in self.state.claim_ids(message_id):  # a pop before a restart may have won
            try:
                got = self._pop(message_id, rid)
            except Conflict:
                continue  # that pop lost; the one that won answers with the message
            if got.get("message") is not None:
                return got
        deadline = time.monotonic() + limits.cli_wait_pop_settle_secs
        delay = 0.05
        while True:
            try:
                got = self._pop(message_id, self.state.new_claim_id(message_id))
            except Conflict as exc:
                state = exc.details.get("state")
                if state != EDITING:  # claimed or cancelled: not ours
                    return None
                # Held for an edit in the web inbox: it goes back to pending.
                deadline, delay = time.monotonic() + limits.cli_wait_pop_settle_secs, 1.0
            else:
                if got.get("message") is not None:
                    return got
                if time.monotonic() >= deadline or not self._pending(message_id):
                    return None
            if self.stop.wait(delay):
                raise _Stopped
            delay = min(delay * 2, limits.listen_reconnect_wait_max_secs)

    def _pop(self, message_id: str, rid: str) -> dict[str, Any]:
        body = drop_none({**_scope_fields(self.scope), "message_id": message_id,
                          "request_id": rid, "agent": self.harness,
                          "lease_seconds": self.lease_secs})
        reply: dict[str, Any] = self._call(lambda c: c.post("/api/v1/messages/pop", body))
        return reply

    def _pending(self, message_id: str) -> bool:
        listed = self._call(lambda c: c.get("/api/v1/messages", box="inbox",
                                            limit=limits.message_list_limit_max,
                                            agent=self.harness, **_scope_fields(self.scope)))
        return any(row.get("id") == message_id for row in listed.get("messages", []))

    def _call(self, call: Callable[[ApiClient], Any]) -> Any:
        """``call`` on the node in use, then the next ones, until one answers or we stop."""
        failures = 0
        while True:
            url = self.urls[(self.url_at + failures) % len(self.urls)]
            try:
                return call(self.make_client(url))
            except Unavailable as exc:
                failures += 1
                wait = min(limits.listen_reconnect_wait_max_secs,
                           0.1 * 2.0 ** (failures // len(self.urls)))
                note(f"listen: {url}: {exc.message}; asking the next node")
                if self.stop.wait(wait):
                    raise _Stopped from None


class _StreamStop(Exception):
    """Raised in the stream thread when stopping while waiting for a free slot."""


class _Lease:
    """The lease on one claimed message while its command runs: renewed at a
    third of its length, completed when the command ends (done, or blocked
    when it failed). A renewal refused because the lease ran out (the
    listener was paused, the network cut) is reported: the message went back
    to the queue and another session may run it too."""

    def __init__(self, listener: Listener, message_id: str, token: str, secs: float) -> None:
        self.listener, self.message_id, self.token, self.secs = listener, message_id, token, secs
        self.done = threading.Event()
        self.lost = False
        self.thread = threading.Thread(target=self._renew, name=f"lease-{message_id[:8]}",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()

    def _renew(self) -> None:
        body = {"message_id": self.message_id, "claim_token": self.token}
        while not self.done.wait(max(0.2, self.secs / 3)):
            try:
                self.listener._call(lambda c: c.post("/api/v1/messages/renew", body))
            except Conflict as exc:
                self.lost = True
                note(f"listen: the lease on {self.message_id} was lost ({exc}); the message "
                     "is back in the queue")
                return
            except AiMemoryError as exc:  # no majority now: the next renewal may pass
                note(f"listen: renewing the lease on {self.message_id} failed: {exc}")

    def finish(self, result: str, why: str | None) -> None:
        self.stop()
        if self.lost:
            return
        body = drop_none({"message_id": self.message_id, "claim_token": self.token,
                          "result": result, "note": why})
        try:
            self.listener._call(lambda c: c.post("/api/v1/messages/complete", body))
        except Conflict as exc:  # the command completed it itself, or the lease ran out
            note(f"listen: completing {self.message_id}: {exc}")


def _item(data: Any, kind: str) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        return None
    inner = data.get("notification" if kind == "notify" else "message")
    return inner if isinstance(inner, dict) else None


def _scope_fields(scope: Scope | None) -> dict[str, str]:
    return {"workspace": scope.workspace, "project": scope.project} if scope else {}


def default_state_path(agent: str | None, scope: Scope | None) -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    parts = [p for p in (agent, scope and f"{scope.workspace}-{scope.project}") if p]
    name = "-".join(parts).replace("/", "_") or "default"
    return base / "ai-memory" / f"listen-{name}.json"


def _feeds(agent: str | None, inbox: bool, scope: Scope | None,
           harness: str | None = None) -> list[Feed]:
    feeds = []
    if inbox and agent:
        feeds.append(Feed(f"inbox:{agent}", "/api/v1/inbox/stream", {"agent_id": agent},
                          "notify"))
    if scope is not None:
        feeds.append(Feed(f"mbox:{scope.workspace}/{scope.project}", "/api/v1/messages/stream",
                          drop_none({**_scope_fields(scope), "agent": harness}), "message"))
    return feeds


@click.command()
@click.option("--agent-id", "agent_id", help="Whose inbox (default: the global --agent-id).")
@click.option("--url", "urls", multiple=True,
              help="A node's address; once per node or comma-separated (default: every member "
                   "of the cluster at the global --url).")
@click.option("--inbox/--no-inbox", "inbox", default=None,
              help="Follow the agent's notify inbox (the default unless --mail is given).")
@click.option("--mail", is_flag=True, help="Follow the project's mailbox (also implied by "
              "--workspace/--project).")
@click.option("--workspace", help="Workspace of the mailbox (else env or .ai-memory.toml).")
@click.option("--project", help="Project of the mailbox (else env or .ai-memory.toml).")
@click.option("--claim", is_flag=True, help="Pop (claim) each message before its command runs; "
              "a message another session claimed first is skipped.")
@click.option("--lease", "lease_secs", type=click.FloatRange(min=limits.claim_lease_secs_min,
                                                             max=limits.claim_lease_secs_max),
              help="With --claim: claim each message for a lease of this many seconds, renewed "
                   "while its command runs and completed when it ends (done, or blocked if it "
                   "failed); a listener that dies leaves it to run out and go to the next one.")
@click.option("--agent", "harness", help="Mail: only what this harness may claim, claimed as "
              "it (like `message pop --agent`).")
@click.option("--exec", "command", help="Run this shell command per event (JSON on stdin).")
@click.option("--json", "as_json", is_flag=True, help="Print each event as one JSON line.")
@click.option("--concurrency", type=click.IntRange(1, limits.listen_concurrency_max),
              default=limits.listen_concurrency_default, show_default=True,
              help="Commands running at once.")
@click.option("--timeout", type=click.FloatRange(min=0.1),
              default=limits.listen_timeout_default_secs, show_default=True,
              help="Seconds one run of the command may take; then it is killed.")
@click.option("--retries", type=click.IntRange(0, limits.listen_retries_max),
              default=limits.listen_retries_default, show_default=True,
              help="Runs after a failed one, with backoff, before the event is dead-lettered.")
@click.option("--state", "state_file", type=click.Path(dir_okay=False, path_type=Path),
              help="The state file (cursor, handled ids); default under $XDG_STATE_HOME.")
@click.option("--dead-letter", type=click.Path(dir_okay=False, path_type=Path),
              help="Where failed events go, one JSON line each (default: STATE.dead.jsonl).")
@pass_state
def listen(state: CliState, agent_id: str | None, urls: tuple[str, ...], inbox: bool | None,
           mail: bool, workspace: str | None, project: str | None, claim: bool,
           lease_secs: float | None, harness: str | None, command: str | None, as_json: bool, concurrency: int, timeout: float, retries: int,
           state_file: Path | None, dead_letter: Path | None) -> None:
    """Follow an inbox and/or a mailbox; run a command (or print JSON) once per event.

    Survives node restarts and fails over between the nodes given, resuming
    from the cursor in its state file. See docs/listen.md.
    """
    who = agent_id or state.agent_id
    mail = mail or bool(workspace or project)
    follow_inbox = inbox if inbox is not None else not mail
    if follow_inbox and not who:
        raise click.UsageError("whose inbox? pass --agent-id or set AI_MEMORY_AGENT_ID")
    if not command and not as_json:
        raise click.UsageError("what to do per event? pass --exec CMD and/or --json")
    if claim and not mail:
        raise click.UsageError("--claim pops mail: it goes with --mail (or --project)")
    if lease_secs is not None and not claim:
        raise click.UsageError("--lease goes with --claim")
    scope = resolve_scope(workspace, project) if mail else None
    if mail and scope is None:
        raise click.UsageError("which mailbox? pass --workspace and --project (or set "
                               "AI_MEMORY_WORKSPACE / AI_MEMORY_PROJECT)")
    feeds = _feeds(who if follow_inbox else None, follow_inbox, scope, harness)
    nodes = node_urls(urls, state.url, key=state.key, api_key=state.api_key)
    note(f"listen: nodes {', '.join(nodes.urls)} ({nodes.source})")
    path = state_file or default_state_path(who if follow_inbox else None, scope)
    store = ListenState.open(path)
    try:
        listener = Listener(
            state=store, urls=nodes.urls,
            make_client=lambda url: state.client(agent_id=who, url=url),
            run=RunSettings(command, timeout, retries) if command else None,
            dead=DeadLetters(dead_letter or path.with_name(path.name + ".dead.jsonl")),
            as_json=as_json, claim=claim, scope=scope, concurrency=concurrency,
            harness=harness, lease_secs=lease_secs)
        _serve(listener, feeds)
    finally:
        store.close()
    if listener.fatal:
        raise listener.fatal[0]


def _serve(listener: Listener, feeds: list[Feed]) -> None:
    """Run the stream threads until a signal or a fatal error, then drain the commands."""
    def on_signal(_signum: int, _frame: Any) -> None:
        listener.stop.set()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    slots = threading.Semaphore(listener.concurrency)
    pool = ThreadPoolExecutor(max_workers=listener.concurrency, thread_name_prefix="listen-run")
    threads = [threading.Thread(target=listener.follow, args=(feed, pool, slots), daemon=True,
                                name=f"listen-{feed.key}") for feed in feeds]
    try:
        for thread in threads:
            thread.start()
        while not listener.stop.wait(0.5):
            if not any(t.is_alive() for t in threads):
                break
    finally:
        listener.stop.set()
        note("listen: stopping; waiting for running commands")
        pool.shutdown(wait=True, cancel_futures=True)
        for sig, handler in old.items():
            signal.signal(sig, handler)
