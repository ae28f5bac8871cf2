"""The single writer: group commit over one SQLite connection.

Every change to the database goes through :class:`Writer`. Callers submit
jobs to a bounded queue and await a future; one task takes whatever jobs are
waiting (up to ``writer_batch_max``) and runs the whole batch as ONE
transaction: ``BEGIN``, the jobs, one op-log insert, the seen-set rows,
``COMMIT``; a large batch on the writer's own thread, a small one on the
event loop (below). A batch of 500 callers therefore costs one thread hop
and one WAL commit instead of 500 of each. Should a job fail (a
malformed op), the batch is rolled back and run again with a savepoint per
job, so that job alone is refused and its neighbours still commit.

The writer owns a plain :mod:`sqlite3` connection on a one-thread executor
rather than an aiosqlite one: aiosqlite runs each statement as its own
hop to its thread, while a batch here is hundreds of statements. The hand-off
is cheap too: while the writer runs, that executor's one thread runs a loop
that takes each batch from a ``queue.SimpleQueue`` and answers it with one
``loop.call_soon_threadsafe``, instead of an executor submit and a chained
concurrent future per batch.

Futures resolve only after ``COMMIT`` returned, so an acknowledged write is
durable (WAL, ``synchronous=NORMAL``: it survives kill -9 of the process).
The in-memory :class:`store.seen.SeenSet` is updated on the event loop
after the commit and before any future resolves, so version vectors never
advertise an op that is not on disk. While a batch runs, the writer thread
only reads the seen-set and the event loop does not change it. The other
side of that order: a read connection can see a commit a moment before
``version_vector`` counts it (the vector is a lower bound of what readers
see), so a caller that needs both waits for the acknowledgement, not for
the row to appear.

A node that is not busy enough to group writes pays that hop for every
commit: two wake-ups of another thread (the batch in, the answer back), each
dear on a virtual machine. So a small batch (at most
``limits.writer_inline_ops_max`` ops, of op applies and of calls marked
``small``) commits on the event loop itself; the loop is blocked for that
one short transaction, the thread is not woken. Larger batches, and any
call not marked small (a GC or a purge may touch thousands of rows), still
go to the thread, and both kinds run strictly one after the other on the one
connection. Because a commit may now run on the loop, the connection's
automatic checkpoint is off (it would copy up to 1,000 pages and sync the
file inside whichever commit crossed the mark): the writer runs a passive
checkpoint on its thread after any write of unbounded size (a GC, a purge)
and otherwise after about ``limits.wal_checkpoint_frames`` frames' worth of
ops (see :meth:`Writer._checkpoint`).

A full queue raises :class:`common.errors.Unavailable` at submit time
(``limits.writer_queue_max``); nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from common import limits
from common import ops as K
from common.errors import AiMemoryError, BadRequest, Unavailable
from common.ops import Op, pack_body
from store.apply import apply_ops
from store.seen import SeenSet

log = logging.getLogger(__name__)


# Ops whose apply may touch any number of rows: never committed on the event
# loop, and followed by a checkpoint (a purge scans its whole mailbox).
_UNBOUNDED_KINDS = frozenset({K.MSG_PURGE})


def _op_weight(op: Op) -> int | None:
    """Rows an op writes, roughly, for the inline limit and the checkpoint
    count; None where there is no bound."""
    if op.kind in _UNBOUNDED_KINDS:
        return None
    if op.kind == K.NOTE_READ:  # one read mark per id (up to limits' cap)
        return max(1, len(op.body.get("ids") or ()))
    return 1


@dataclass(slots=True)
class _Batch:
    """What the jobs of one batch have done so far (on whichever thread commits it)."""

    new_ids: dict[str, set[int]] = field(default_factory=dict)
    log_rows: list[tuple[str, int, int, str, str, int, bytes]] = field(default_factory=list)
    max_hlc: int = 0

    def has(self, op: Op) -> bool:
        return op.seq in self.new_ids.get(op.origin, ())


class _Job:
    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self.future = future

    @property
    def weight(self) -> int | None:
        """About how many rows this job writes (ops, for op applies); None:
        no bound, so never on the event loop, and a checkpoint after it."""
        return None

    def run(self, conn: sqlite3.Connection, seen: SeenSet, batch: _Batch) -> Any:
        raise NotImplementedError

    def done(self, batch: _Batch, result: Any) -> None:
        """Record a successful run in the batch."""


class _ApplyJob(_Job):
    __slots__ = ("_weight", "log_rows", "now_ms", "ops")

    def __init__(self, future: asyncio.Future[Any], ops: list[Op], now_ms: int) -> None:
        super().__init__(future)
        self.ops = ops
        self.now_ms = now_ms
        self.log_rows: list[tuple[str, int, int, str, str, int, bytes]] = []
        weights = [_op_weight(op) for op in ops]
        self._weight = None if None in weights else sum(w for w in weights if w is not None)

    @property
    def weight(self) -> int | None:
        return self._weight

    def run(self, conn: sqlite3.Connection, seen: SeenSet, batch: _Batch) -> list[Op]:
        fresh: list[Op] = []
        ids: set[tuple[str, int]] = set()
        for op in self.ops:
            if op.op_id in seen or batch.has(op) or op.op_id in ids:
                continue
            ids.add(op.op_id)
            fresh.append(op)
        apply_ops(conn, fresh, self.now_ms)
        self.log_rows = [(op.origin, op.seq, op.hlc, op.kind, op.key, op.epoch,
                          pack_body(op.body)) for op in fresh]
        return fresh

    def done(self, batch: _Batch, result: Any) -> None:
        batch.log_rows.extend(self.log_rows)
        for op in result:
            batch.new_ids.setdefault(op.origin, set()).add(op.seq)
            batch.max_hlc = max(batch.max_hlc, op.hlc)


class _CallJob(_Job):
    """Any other write: ``fn(conn)`` inside the batch transaction."""

    __slots__ = ("fn", "small")

    def __init__(self, future: asyncio.Future[Any],
                 fn: Callable[[sqlite3.Connection], Any], small: bool) -> None:
        super().__init__(future)
        self.fn = fn
        self.small = small

    @property
    def weight(self) -> int | None:
        return 1 if self.small else None

    def run(self, conn: sqlite3.Connection, seen: SeenSet, batch: _Batch) -> Any:
        return self.fn(conn)


_STOP = object()


class _JobFailed(Exception):
    """A job failed in an optimistic batch: run the batch again, isolated."""


@dataclass(slots=True)
class WriterStats:
    batches: int = 0
    jobs: int = 0
    largest_batch: int = 0
    failed_batches: int = 0
    inline_batches: int = 0  # committed on the event loop
    checkpoints: int = 0
    checkpoint_frames: int = 0  # WAL frames at the last checkpoint
    failed_checkpoints: int = 0


class Writer:
    """Owns the write connection; see the module docstring."""

    def __init__(self, conn: sqlite3.Connection, executor: ThreadPoolExecutor, seen: SeenSet,
                 max_hlc: int, *, queue_max: int = limits.writer_queue_max,
                 batch_max: int = limits.writer_batch_max,
                 inline_ops_max: int = limits.writer_inline_ops_max,
                 checkpoint_ops: int = limits.wal_checkpoint_ops) -> None:
        self._conn = conn
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # the writer checkpoints (see above)
        self._executor = executor
        self.seen = seen
        self.max_hlc = max_hlc
        self._batch_max = batch_max
        self._inline_ops_max = inline_ops_max
        self._checkpoint_ops = checkpoint_ops  # adjusted after each checkpoint (see _checkpoint)
        self._since_checkpoint = 0  # ops committed since the last checkpoint
        self._queue: asyncio.Queue[_Job | object] = asyncio.Queue(maxsize=queue_max)
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        # Work for the writer thread: (its future, what to run there), None to stop.
        self._inbox: queue.SimpleQueue[tuple[asyncio.Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue())
        self._thread: Any = None  # the executor's future for the thread loop
        self._current: list[_Job] = []  # the batch in hand (settled if the task is cancelled)
        self.stats = WriterStats()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._thread = self._executor.submit(self._serve, loop)
        self._task = loop.create_task(self._run(), name="store-writer")

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        """The writer thread: run each piece of work, answer on the event loop."""
        while True:
            item = self._inbox.get()
            if item is None:
                return
            fut, work = item
            try:
                outcome = work()
            except BaseException as exc:  # handed to the awaiting task, whatever it is
                loop.call_soon_threadsafe(_hand_back, fut, exc, None)
            else:
                loop.call_soon_threadsafe(_hand_back, fut, None, outcome)

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize()

    # -- submitting ------------------------------------------------------------

    def _submit(self, make: Callable[[asyncio.Future[Any]], _Job]) -> asyncio.Future[Any]:
        if self._closing:
            raise Unavailable("store closing", reason="shutting_down")
        job = make(asyncio.get_running_loop().create_future())
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            raise Unavailable("store overloaded", limit="writer_queue_max",
                              queue_max=self._queue.maxsize) from None
        return job.future

    async def apply(self, ops: list[Op], now_ms: int) -> list[Op]:
        result: list[Op] = await self._submit(lambda fut: _ApplyJob(fut, ops, now_ms))
        return result

    async def call(self, fn: Callable[[sqlite3.Connection], Any], *, small: bool = False) -> Any:
        """Run ``fn(conn)`` inside a batch transaction; return its result.
        ``small``: it writes a row or two, so it may commit on the event loop."""
        return await self._submit(lambda fut: _CallJob(fut, fn, small))

    # -- the loop --------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._batches()
        finally:
            # Cancelled (the loop torn down before close()): nobody would ever
            # answer the callers of the batch in hand or of the queued jobs.
            self._closing = True
            gone = Unavailable("store closing", reason="shutting_down")
            for job in self._current:
                _settle(job.future, gone, None)
            while not self._queue.empty():
                queued = self._queue.get_nowait()
                if isinstance(queued, _Job):
                    _settle(queued.future, gone, None)
            self._inbox.put(None)  # the writer thread's loop ends; the executor is free again
            if self._thread is not None:
                await asyncio.wrap_future(self._thread)

    async def _batches(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is _STOP:
                break
            jobs = [first]
            while len(jobs) < self._batch_max and not self._queue.empty():
                nxt = self._queue.get_nowait()
                if nxt is _STOP:
                    stopping = True
                    break
                jobs.append(nxt)
            batch_jobs = [j for j in jobs if isinstance(j, _Job)]
            self._current = batch_jobs
            weights = [j.weight for j in batch_jobs]
            ops = None if None in weights else sum(w for w in weights if w is not None)
            try:
                if ops is not None and ops <= self._inline_ops_max:
                    outcome = self._commit(batch_jobs)
                    self.stats.inline_batches += 1
                else:
                    outcome = await self._on_thread(loop, functools.partial(self._commit, batch_jobs))
            except Exception as exc:
                self.stats.failed_batches += 1
                err: BaseException = exc
                if isinstance(exc, sqlite3.Error):
                    err = Unavailable("store write failed", reason=str(exc))
                for job in batch_jobs:
                    _settle(job.future, err, None)
                continue
            results, marks, max_hlc = outcome
            for origin, (mark, held) in marks.items():
                self.seen.install(origin, mark, held)
            self.max_hlc = max(self.max_hlc, max_hlc)
            self.stats.batches += 1
            self.stats.jobs += len(batch_jobs)
            self.stats.largest_batch = max(self.stats.largest_batch, len(batch_jobs))
            for job, (error, value) in zip(batch_jobs, results, strict=True):
                _settle(job.future, error, value)
            if ops is None:  # rows beyond count: copy them out of the WAL now
                await self._checkpoint(loop, adjust=False)
                continue
            self._since_checkpoint += ops
            if self._since_checkpoint >= self._checkpoint_ops:
                await self._checkpoint(loop, adjust=True)

    async def _on_thread(self, loop: asyncio.AbstractEventLoop, work: Callable[[], Any]) -> Any:
        done: asyncio.Future[Any] = loop.create_future()
        self._inbox.put((done, work))
        return await done

    async def _checkpoint(self, loop: asyncio.AbstractEventLoop, *, adjust: bool) -> None:
        """Copy the WAL into the database on the writer thread (passive: it
        never waits for readers; what they still use is copied next time).

        ``adjust``: the WAL held only the ops counted since the last one, so
        its size in frames says how many frames an op writes now (about 4
        with full batches, 11 with one op a commit); the next checkpoint
        comes after as many ops as make ``limits.wal_checkpoint_frames``,
        about SQLite's own 1,000-page mark."""
        ops, self._since_checkpoint = self._since_checkpoint, 0

        def run() -> Any:
            return self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        try:
            row = await self._on_thread(loop, run)
        except sqlite3.Error as exc:  # commits are unaffected; the next one tries again
            self.stats.failed_checkpoints += 1
            log.warning("WAL checkpoint failed (%s); the next is tried after %d more ops",
                        exc, self._checkpoint_ops)
            return
        frames = int(row[1]) if row else 0
        self.stats.checkpoints += 1
        self.stats.checkpoint_frames = frames
        if adjust and frames > 0 and ops > 0:
            self._checkpoint_ops = min(limits.wal_checkpoint_ops_max, max(
                limits.wal_checkpoint_ops_min, ops * limits.wal_checkpoint_frames // frames))

    def _commit(self, jobs: list[_Job]) -> tuple[
            list[tuple[BaseException | None, Any]], dict[str, tuple[int, set[int]]], int]:
        """One transaction for the whole batch (on the writer thread, or on the
        event loop for a small batch; never both at once).

        Jobs first run back to back with no savepoints; if one of them fails,
        that transaction is rolled back and the batch runs again with a
        savepoint around each job, so only the failing job is refused."""
        try:
            return self._transaction(jobs, isolate=False)
        except _JobFailed:
            return self._transaction(jobs, isolate=True)

    def _transaction(self, jobs: list[_Job], *, isolate: bool) -> tuple[
            list[tuple[BaseException | None, Any]], dict[str, tuple[int, set[int]]], int]:
        conn = self._conn
        batch = _Batch()
        results: list[tuple[BaseException | None, Any]] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for job in jobs:
                if isolate:
                    conn.execute("SAVEPOINT job")
                try:
                    value = job.run(conn, self.seen, batch)
                except Exception as exc:
                    if _is_fatal(exc):
                        raise
                    if not isolate:
                        raise _JobFailed from exc
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    results.append((_as_client_error(exc), None))
                    continue
                if isolate:
                    conn.execute("RELEASE job")
                job.done(batch, value)
                results.append((None, value))
            conn.executemany(
                "INSERT INTO oplog (origin, seq, hlc, kind, key, epoch, body)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)", batch.log_rows)
            marks = self._persist_seen(conn, batch)
            if batch.max_hlc > self.max_hlc:
                conn.execute("INSERT INTO node_meta (name, value) VALUES ('max_hlc', ?)"
                             " ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)",
                             (batch.max_hlc,))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return results, marks, batch.max_hlc

    def _persist_seen(self, conn: sqlite3.Connection,
                      batch: _Batch) -> dict[str, tuple[int, set[int]]]:
        marks = {origin: self.seen.advanced(origin, seqs)
                 for origin, seqs in batch.new_ids.items()}
        conn.executemany("INSERT INTO vv (origin, watermark) VALUES (?, ?)"
                         " ON CONFLICT (origin) DO UPDATE SET watermark = excluded.watermark",
                         [(origin, mark) for origin, (mark, _) in marks.items()])
        conn.executemany("DELETE FROM vv_held WHERE origin = ? AND seq <= ?",
                         [(origin, mark) for origin, (mark, held) in marks.items()
                          if origin in self.seen.held])
        conn.executemany("INSERT OR IGNORE INTO vv_held (origin, seq) VALUES (?, ?)",
                         [(origin, s) for origin, seqs in batch.new_ids.items()
                          for s in seqs if s > marks[origin][0]])
        return marks

    # -- shutdown ----------------------------------------------------------------

    async def close(self) -> None:
        """Refuse new jobs, finish every queued one, stop the task."""
        if self._closing:
            return
        self._closing = True
        if self._task is None:
            return
        await self._queue.put(_STOP)
        await self._task


def _hand_back(future: asyncio.Future[Any], error: BaseException | None, value: Any) -> None:
    """On the event loop: a batch's outcome, from the writer thread."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _settle(future: asyncio.Future[Any], error: BaseException | None, value: Any) -> None:
    if future.done():  # the caller gave up; the write still happened
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _is_fatal(exc: Exception) -> bool:
    """Errors that doom the whole transaction (I/O, locking, corruption)."""
    return isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError


def _as_client_error(exc: Exception) -> BaseException:
    if isinstance(exc, AiMemoryError):
        return exc
    return BadRequest(f"malformed write: {type(exc).__name__}: {exc}")
