"""The load generator: keep-alive HTTP clients in their own processes.

The server under test gets the machine's cores only if the client does not
share its event loop or its process, so every measured phase runs in a pool
of spawned worker processes (:class:`LoadPool`). A :class:`LoadJob` says
what to send (a :class:`~bench.workloads.WorkloadSpec`), where (base URLs,
used round-robin) and how:

``closed``  ``concurrency`` workers each loop send-wait-send for
            ``duration_s`` after ``warmup_s``; this finds the maximum
            throughput.
``open``    operations start at a fixed ``rate`` regardless of answers,
            as independent users would; an operation's latency is counted
            from the moment it was *due*, so a stalled server shows up as
            latency instead of being hidden by the client slowing down
            (coordinated omission). Starts beyond ``max_inflight`` are
            dropped and counted.
``count``   ``total`` operations with ``concurrency`` workers (to fill
            inboxes, and for sequential latency with one worker); a
            positive ``deadline_s`` stops it early.

A job is split evenly across the pool's processes; all of them start at the
same wall-clock instant (``start_at``) and report :class:`~bench.stats.Sample`
objects per request kind plus ``op`` for whole operations. Progress is
published through one shared counter that the parent turns into a bar.
When the job names the servers' pids (``cpu_pids``), each process also
reads their CPU counters from /proc when its measured window opens and
closes (:mod:`bench.cpu`), so every result carries the CPU the servers
burned per operation.

The client is aiohttp's ``ClientSession`` (``client="aiohttp"``, the
default, which every recorded run used) or :class:`bench.rawhttp.RawSession`
(``client="raw"``), which costs 30-44 % of its CPU per request. On a
machine whose cores the client shares with the servers, every microsecond
it spends is taken from them; docs/performance.md has what the lean client
changes, and why it is not yet the default.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import math
import multiprocessing
import multiprocessing.sharedctypes
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from bench.cpu import CpuProbe, CpuWindow, merge_windows
from bench.rawhttp import RawSession, decode_json
from bench.stats import Sample, merge_samples
from bench.workloads import OPERATIONS, WorkloadSpec

MODES = ("closed", "open", "count")
CLIENTS = ("raw", "aiohttp")
REQUEST_TIMEOUT_S = 30.0
PROGRESS_FLUSH_S = 0.1


@dataclass(frozen=True)
class LoadJob:
    workload: WorkloadSpec
    targets: tuple[str, ...]
    mode: str = "closed"
    concurrency: int = 64
    duration_s: float = 5.0
    warmup_s: float = 1.0
    rate: float = 0.0  # open loop: operations per second
    max_inflight: int = 2048  # open loop: operations in flight before starts are dropped
    connections: int = 256  # open loop: keep-alive connections (closed loop: one per worker)
    total: int = 0  # count mode
    deadline_s: float = 0.0  # count mode: stop starting operations after this long (0 = never)
    seed: int = 1
    start_at: float = 0.0  # time.time() at which every process starts
    cpu_pids: tuple[tuple[str, int], ...] = ()  # (name, pid) of the servers whose CPU is measured
    client: str = "aiohttp"  # the HTTP client: "aiohttp" or "raw" (bench.rawhttp)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.client not in CLIENTS:
            raise ValueError(f"client must be one of {CLIENTS}, got {self.client!r}")
        if not self.targets:
            raise ValueError("a load job needs at least one target URL")
        if self.mode == "open" and self.rate <= 0:
            raise ValueError("open loop needs a positive rate")
        if self.mode == "count" and self.total <= 0:
            raise ValueError("count mode needs a positive total")
        if self.mode != "open" and self.concurrency <= 0:
            raise ValueError("concurrency must be positive")

    def split(self, parts: int) -> list[LoadJob]:
        """This job as at most ``parts`` jobs whose sum is the whole.

        No part is left without a worker (or, in count mode, without an
        operation), so a one-client job stays one client in one process.
        """
        n = parts
        if self.mode != "open":
            n = min(n, self.concurrency)
        if self.mode == "count":
            n = min(n, self.total)
        return [
            replace(
                self,
                concurrency=_share(self.concurrency, n, i) if self.mode != "open" else self.concurrency,
                rate=self.rate / n,
                max_inflight=max(self.max_inflight // n, 1),
                connections=max(self.connections // n, 1),
                total=_share(self.total, n, i),
                seed=self.seed * 1000 + i,
            )
            for i in range(n)
        ]


def _share(n: int, parts: int, i: int) -> int:
    return n // parts + (1 if i < n % parts else 0)


@dataclass
class LoadResult:
    samples: dict[str, Sample]
    elapsed_s: float
    ops_started: int
    cpu: CpuWindow | None = None  # the servers' CPU over the measured window


# --- worker process ---------------------------------------------------------

_progress: Any = None  # multiprocessing.Value('q') in workers, set by _init_worker


def _init_worker(counter: Any) -> None:
    global _progress
    _progress = counter


def _ping() -> bool:
    return True


def add_progress(n: int) -> None:
    """Count ``n`` more completed operations on the parent's progress bar."""
    if _progress is not None and n:
        with _progress.get_lock():
            _progress.value += n


class _Client:
    """Issues requests round-robin over the targets; owns the samples."""

    def __init__(self, session: aiohttp.ClientSession | RawSession, targets: tuple[str, ...],
                 probe: CpuProbe | None = None) -> None:
        self.session = session
        self.targets = targets
        self.probe = probe or CpuProbe(())
        self.samples: dict[str, Sample] = {}
        self._next = 0
        self.done = 0

    def sample(self, kind: str) -> Sample:
        s = self.samples.get(kind)
        if s is None:
            s = self.samples[kind] = Sample()
        return s

    def next_target(self) -> str:
        base = self.targets[self._next % len(self.targets)]
        self._next += 1
        return base


class _OpRequester:
    """The :class:`~bench.workloads.Requester` one operation sees.

    It times each request and records it only if the operation itself is
    recorded, so warm-up requests stay out of every sample.
    """

    __slots__ = ("client", "record")

    def __init__(self, client: _Client, record: bool) -> None:
        self.client = client
        self.record = record

    def count(self, event: str, n: int = 1) -> None:
        if self.record:
            self.client.sample("op").count(event, n)

    async def call(
        self,
        kind: str,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        want_body: bool = False,
        port_offset: int = 0,
    ) -> tuple[int, Any]:
        base = self.client.next_target()
        if port_offset:
            base = _moved(base, port_offset)
        url = base + path
        t0 = time.perf_counter()
        session = self.client.session
        body: Any = None
        try:
            if isinstance(session, RawSession):
                status, raw = await session.request(method, url, json=json, params=params, headers=headers)
                if want_body and status < 300:
                    body = decode_json(raw)
            else:
                async with session.request(method, url, json=json, params=params, headers=headers) as resp:
                    if want_body and resp.status < 300:
                        body = await resp.json(content_type=None)
                    else:
                        await resp.read()
                    status = resp.status
        except (TimeoutError, aiohttp.ClientError, ValueError):
            if self.record:
                self.client.sample(kind).record_transport_error((time.perf_counter() - t0) * 1000.0)
            raise
        if self.record:
            self.client.sample(kind).record(status, (time.perf_counter() - t0) * 1000.0)
        return status, body


@functools.lru_cache(maxsize=256)
def _moved(base: str, offset: int) -> str:
    """``base`` (scheme://host:port) with its port moved by ``offset``."""
    u = urlsplit(base)
    return f"{u.scheme}://{u.hostname}:{(u.port or 80) + offset}"


async def _one(client: _Client, job: LoadJob, rng: random.Random, due: float, record: bool) -> None:
    op = OPERATIONS[job.workload.name]
    try:
        status = await op(_OpRequester(client, record), job.workload, rng)
    except (TimeoutError, aiohttp.ClientError, ValueError):
        if record:
            client.sample("op").record_transport_error((time.perf_counter() - due) * 1000.0)
    else:
        if record:
            client.sample("op").record(status, (time.perf_counter() - due) * 1000.0)
    client.done += 1


async def _flush_progress(client: _Client, stop: asyncio.Event) -> None:
    sent = 0
    while True:
        if client.done != sent:
            add_progress(client.done - sent)
            sent = client.done
        if stop.is_set():
            return
        try:
            await asyncio.wait_for(stop.wait(), PROGRESS_FLUSH_S)
        except TimeoutError:
            pass


async def _closed(client: _Client, job: LoadJob, rng: random.Random) -> float:
    t_begin = time.perf_counter()
    t_measure = t_begin + job.warmup_s
    t_end = t_measure + job.duration_s
    asyncio.get_running_loop().call_later(job.warmup_s, client.probe.open)

    async def worker(k: int) -> None:
        wrng = random.Random(rng.getrandbits(64) + k)
        while True:
            now = time.perf_counter()
            if now >= t_end:
                return
            await _one(client, job, wrng, now, record=now >= t_measure)

    await asyncio.gather(*(worker(k) for k in range(job.concurrency)))
    # Operations started inside the window are all counted, so the window
    # runs until the last of them answered.
    return time.perf_counter() - t_measure


async def _count(client: _Client, job: LoadJob, rng: random.Random) -> float:
    remaining = job.total
    t0 = time.perf_counter()
    deadline = t0 + job.deadline_s if job.deadline_s > 0 else math.inf
    client.probe.open()

    async def worker(k: int) -> None:
        nonlocal remaining
        wrng = random.Random(rng.getrandbits(64) + k)
        while remaining > 0 and time.perf_counter() < deadline:
            remaining -= 1
            await _one(client, job, wrng, time.perf_counter(), record=True)

    await asyncio.gather(*(worker(k) for k in range(job.concurrency)))
    return time.perf_counter() - t0


async def _open(client: _Client, job: LoadJob, rng: random.Random) -> float:
    interval = 1.0 / job.rate
    n = max(int(job.rate * job.duration_s), 1)
    t0 = time.perf_counter()
    tasks: set[asyncio.Task[None]] = set()
    dropped = 0
    i = 0
    client.probe.open()
    while i < n:
        now = time.perf_counter()
        while i < n and t0 + i * interval <= now:
            due = t0 + i * interval
            i += 1
            if len(tasks) >= job.max_inflight:
                dropped += 1
                continue
            # One event loop thread: the operations may share one generator.
            t = asyncio.create_task(_one(client, job, rng, due, record=True))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        if i < n:
            await asyncio.sleep(max(t0 + i * interval - time.perf_counter(), 0.001))
    if tasks:
        await asyncio.gather(*tasks)
    client.sample("op").dropped += dropped
    # Until the last answer: a server that falls behind cannot look faster
    # than it was.
    return time.perf_counter() - t0


_RUNNERS: dict[str, Callable[[_Client, LoadJob, random.Random], Coroutine[Any, Any, float]]] = {
    "closed": _closed,
    "open": _open,
    "count": _count,
}


async def _open_connections(session: aiohttp.ClientSession | RawSession, targets: tuple[str, ...],
                            n: int) -> None:
    """Open about ``n`` keep-alive connections before the clock starts.

    Concurrent health checks force distinct connections; growing the
    batch step by step reuses the ones already open, so no more than half
    of them are being set up at any moment (a burst of hundreds of
    connects is itself a load spike the server would be measured on).
    """
    k = min(16, n)
    while True:
        async def ping(i: int) -> None:
            url = targets[i % len(targets)] + "/api/v1/health"
            if isinstance(session, RawSession):
                await session.request("GET", url)
                return
            async with session.get(url) as resp:
                await resp.read()

        await asyncio.gather(*(ping(i) for i in range(k)), return_exceptions=True)
        if k >= n:
            return
        k = min(k * 2, n)


def _session(job: LoadJob, limit: int) -> aiohttp.ClientSession | RawSession:
    if job.client == "raw":
        return RawSession(job.targets, limit, REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=None, force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))


async def _run_async(job: LoadJob) -> LoadResult:
    limit = job.connections if job.mode == "open" else job.concurrency
    async with _session(job, limit) as session:
        client = _Client(session, job.targets, CpuProbe(job.cpu_pids))
        client._next = job.seed  # spread processes over the targets
        await _open_connections(session, job.targets, limit)
        delay = job.start_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        stop = asyncio.Event()
        flusher = asyncio.create_task(_flush_progress(client, stop))
        try:
            elapsed = await _RUNNERS[job.mode](client, job, random.Random(job.seed))
            cpu = client.probe.close()
        finally:
            stop.set()
            await flusher
    return LoadResult(samples=client.samples, elapsed_s=elapsed, ops_started=client.done, cpu=cpu)


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def run_job(job: LoadJob) -> LoadResult:
    """Entry point inside a worker process (also usable in-process)."""
    with asyncio.Runner(loop_factory=_new_loop) as runner:
        return runner.run(_run_async(job))


# --- parent side --------------------------------------------------------------


class LoadPool:
    """A pool of spawned load-generator processes, reused across phases."""

    def __init__(self, processes: int = 1) -> None:
        if processes < 1:
            raise ValueError("need at least one load-generator process")
        ctx = multiprocessing.get_context("spawn")
        self.processes = processes
        self.counter: multiprocessing.sharedctypes.Synchronized[int] = ctx.Value("q", 0)
        self._pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=processes, mp_context=ctx, initializer=_init_worker, initargs=(self.counter,)
        )
        # Start every worker now, so no phase pays for process start-up.
        for f in [self._pool.submit(_ping) for _ in range(processes * 2)]:
            f.result(timeout=60)

    def __enter__(self) -> LoadPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def run(
        self,
        job: Any,
        on_progress: Callable[[int], None] | None = None,
        start_delay_s: float = 0.3,
        runner: Callable[[Any], LoadResult] = run_job,
    ) -> LoadResult:
        """Run ``job`` across the pool and merge what the processes measured.

        ``job`` is a :class:`LoadJob` or any frozen dataclass with the same
        ``split(parts)`` and ``start_at`` that ``runner`` (a picklable
        top-level function) executes in a worker. ``on_progress`` receives
        the number of operations completed so far, a few times a second,
        until the job ends.
        """
        with self.counter.get_lock():
            self.counter.value = 0
        start_at = time.time() + start_delay_s
        parts = replace(job, start_at=start_at).split(self.processes)
        futures = [self._pool.submit(runner, p) for p in parts]
        while True:
            done, _ = concurrent.futures.wait(futures, timeout=0.2)
            if on_progress is not None:
                on_progress(self.counter.value)
            if len(done) == len(futures):
                break
        results = [f.result() for f in futures]
        return LoadResult(
            samples=merge_samples(r.samples for r in results),
            elapsed_s=max(r.elapsed_s for r in results),
            ops_started=sum(r.ops_started for r in results),
            cpu=merge_windows(r.cpu for r in results),
        )
