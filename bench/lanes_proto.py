"""A prototype of lanes, measured before the build (docs/lanes.md).

It answers three questions with the real daemon code, unchanged, on this
machine:

(a) how many notifies per second one node gives with one lane, and with two
    lane processes that share one client port (``SO_REUSEPORT``), each with
    its own SQLite file and its own federation core;
(b) what the hand-off costs: a notify that reaches the lane which does not
    own its recipient's inbox is handed to the owning lane over a local
    unix socket, at the service boundary (the receiving lane has parsed,
    authenticated and validated the request; the owner runs
    ``daemon.services.notify`` with the caller's identity and answers);
(c) the alternative: HTTP worker processes in front of one process that
    owns all the data (every notify is handed over, at the same boundary).

Every process here is a real node (``daemon.wiring.build_node``, the real
app of ``daemon.api.app.build_app``, the real ``BoundaryRunner``), single
member, anonymous mode, on loopback. The prototype adds only what lanes
would add: the ``reuse_port`` listener, the hand-off link and server, and
a notify operation that decides where the request runs. Each lane process
also listens on a port of its own (what a lane's peers and its control
requests would use); ``POST /proto/mode`` there switches its hand-off rule
between runs, so one pair of processes serves three configurations:

``key``   the recipient's inbox decides the lane (``common.lanes.lane_of``);
          about half the notifies of two lanes are handed over;
``none``  each lane writes what it receives: two independent lanes, the
          ceiling of (a) without any hand-off;
``all``   every notify is handed to the other lane: the cost of the hop,
          against ``none``, per request.

Run (about 3 minutes; the load average goes into the report):

    .venv/bin/python -m bench.lanes_proto run --rounds 4 --seconds 5

Every system is started once and driven in turn, the order reversed each
round, as the paired rounds of ``python -m bench`` do; the lean client
(``bench.rawhttp``) drives them from one load-generator process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import struct
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from daemon.lanes.frames import Framed

HOST = "127.0.0.1"
_LEN = struct.Struct(">I")
FRAME_MAX = 16 * 1024 * 1024


# --- the hand-off link: length-prefixed msgpack frames over a unix socket ----------


# The framing is the daemon's own (daemon/lanes/frames.py), which grew out of this prototype.
_Framed = Framed


class HandoffClient(_Framed):
    """One lane's link to another: requests out, answers matched by id."""

    def __init__(self) -> None:
        super().__init__()
        self._next = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self.closed = False

    def frame(self, obj: Any) -> None:
        rid, ok, payload = obj
        fut = self._waiting.pop(rid, None)
        if fut is None or fut.done():
            return
        if ok:
            fut.set_result(payload)
        else:
            fut.set_exception(_decode_error(payload))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(ConnectionError("hand-off link closed"))
        self._waiting.clear()

    def call(self, op: str, args: Any) -> asyncio.Future[Any]:
        self._next += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = fut
        self.send([self._next, op, args])
        return fut


def _decode_error(raw: Any) -> Exception:
    from daemon.replication.forwarding import decode_error

    return decode_error(raw)


class Link:
    """Connects on first use; one connection per (lane, lane), pipelined."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._proto: HandoffClient | None = None
        self._lock = asyncio.Lock()

    async def call(self, op: str, args: Any) -> Any:
        proto = self._proto
        if proto is None or proto.closed:
            async with self._lock:
                if self._proto is None or self._proto.closed:
                    _, self._proto = await asyncio.get_running_loop().create_unix_connection(
                        HandoffClient, self.path)
                proto = self._proto
        return await proto.call(op, args)


class HandoffServer(_Framed):
    """The owning lane's side: runs each request as a task, answers in any order."""

    def __init__(self, ops: dict[str, Callable[[Any], Awaitable[Any]]], stats: dict[str, int]) -> None:
        super().__init__()
        self.ops = ops
        self.stats = stats

    def frame(self, obj: Any) -> None:
        rid, op, args = obj
        self.stats["received"] = self.stats.get("received", 0) + 1
        asyncio.get_running_loop().create_task(self._run(rid, op, args))

    async def _run(self, rid: int, op: str, args: Any) -> None:
        from common.errors import AiMemoryError, Unavailable
        from daemon.replication.forwarding import encode_error

        try:
            result = await self.ops[op](args)
        except AiMemoryError as exc:
            self.send([rid, False, encode_error(exc)])
        except Exception as exc:  # a prototype: any failure is the caller's 503
            self.send([rid, False, encode_error(Unavailable(f"hand-off failed: {exc!r}"))])
        else:
            if self.transport is not None and not self.transport.is_closing():
                self.send([rid, True, result])


# --- one lane process ------------------------------------------------------------


@dataclass
class LaneState:
    index: int
    lanes: int
    mode: str  # key | none | all | front
    sock_dir: str
    group: str
    core: str | None  # front mode: the core's socket path
    links: dict[int, Link] = field(default_factory=dict)
    core_link: Link | None = None
    stats: dict[str, int] = field(default_factory=dict)
    conns: set[Any] = field(default_factory=set)

    def sock_path(self, lane: int) -> str:
        return os.path.join(self.sock_dir, f"{self.group}-{lane}.sock")

    def link(self, lane: int) -> Link:
        got = self.links.get(lane)
        if got is None:
            got = self.links[lane] = Link(self.sock_path(lane))
        return got

    def target(self, recipient: str | None) -> Link | None:
        """Where a notify to ``recipient`` runs: None here, else the link to use."""
        from common.lanes import lane_of
        from common.ops import inbox_key

        if self.mode == "front":
            if self.core_link is None:
                assert self.core is not None
                self.core_link = Link(self.core)
            return self.core_link
        if self.mode == "none" or self.lanes == 1 or recipient is None:
            return None
        if self.mode == "all":
            return self.link((self.index + 1) % self.lanes)
        owner = lane_of(inbox_key(recipient), self.lanes)
        return None if owner == self.index else self.link(owner)

    def count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1


class WriteCoalescer:
    """``node.write`` for every caller of one pass of the event loop as ONE
    quorum write (an experiment: does a lane lose its group commits because
    its writes come from two streams, its own requests and handed ones?)."""

    def __init__(self, write: Callable[[Any], Awaitable[Any]]) -> None:
        self._write = write
        self._pending: list[tuple[Any, asyncio.Future[Any]]] = []
        self.enabled = False

    async def __call__(self, items: Any) -> Any:
        if not self.enabled:
            return await self._write(items)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((items, fut))
        if len(self._pending) == 1:
            asyncio.get_running_loop().call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.get_running_loop().create_task(
            self._write([i for items, _ in batch for i in items]))

        def done(t: asyncio.Task[Any]) -> None:
            exc = t.exception()
            ops = None if exc is not None else t.result()
            at = 0
            for items, fut in batch:
                if fut.done():
                    continue
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.set_result(ops[at:at + len(items)])
                at += len(items)

        task.add_done_callback(done)


def _principal_wire(p: Any) -> list[Any]:
    return [p.mode, p.user, p.root, p.agent, p.agent_bound, p.key_id,
            [[g.workspace, g.project, g.access] for g in p.grants], p.owner_user]


def _principal_from_wire(raw: list[Any]) -> Any:
    from common.policy import Principal, ProjectGrant

    mode, user, root, agent, bound, key_id, grants, owner = raw
    return Principal(mode=mode, user=user, root=root, agent=agent, agent_bound=bound,
                     key_id=key_id, grants=tuple(ProjectGrant(*g) for g in grants),
                     owner_user=owner)


def _install_notify(lane: LaneState) -> None:
    """Swap the notify operation for one that runs where the lane rule says."""
    import daemon.api.notify as api_notify
    from daemon.api.call import ApiCall, Route
    from daemon.schemas.notify import NotifyRequest
    from daemon.services import notify as service

    async def notify(c: ApiCall) -> Any:
        key = c.idempotency_key
        req = await c.body(NotifyRequest)
        sender = api_notify._caller(c, req.agent_id)
        lane.conns.add(c.request.transport.get_extra_info("peername")
                       if c.request.transport is not None else None)
        single = req.target_agent_id if isinstance(req.target_agent_id, str) else None
        link = lane.target(single if req.broadcast_prefix is None else None)
        if link is None:
            lane.count("served")
            return await service.notify(c.node, req, sender=sender, idempotency_key=key)
        lane.count("handed")
        return await link.call("notify", [req.model_dump(), sender, key,
                                          _principal_wire(c.principal)])

    api_notify.OPERATIONS[:] = [
        Route(r.method, r.path, notify, r.status) if r.path == "/api/v1/notify" else r
        for r in api_notify.OPERATIONS]


def _handoff_ops(node: Any) -> dict[str, Callable[[Any], Awaitable[Any]]]:
    from daemon.schemas.notify import NotifyRequest
    from daemon.services import notify as service

    async def notify(args: Any) -> Any:
        fields, sender, key, principal = args
        _principal_from_wire(principal)  # what an authorisation check on this side would read
        req = NotifyRequest.model_construct(**fields)  # validated by the lane that received it
        return await service.notify(node, req, sender=sender, idempotency_key=key)

    return {"notify": notify}


async def _lane_main(a: argparse.Namespace) -> None:
    from aiohttp import web

    from daemon.api.app import build_app
    from daemon.http.errors import BoundaryRunner
    from daemon.replication.joining import prepare
    from daemon.runtime import collector
    from daemon.settings import load_settings
    from daemon.wiring import build_node

    lane = LaneState(index=a.lane, lanes=a.lanes, mode=a.mode, sock_dir=a.sock_dir,
                     group=a.group, core=a.core)
    settings = load_settings({"host": HOST, "port": a.private_port, "db": a.db,
                              "node_id": f"{a.group}-{a.lane}", "log_level": "warning"}, env={})
    settings = await prepare(settings)
    node = await build_node(settings)
    await node.start()
    coalescer = WriteCoalescer(node.write)
    node.write = coalescer  # type: ignore[method-assign]
    _install_notify(lane)
    app = build_app(node)

    async def mode(request: web.Request) -> web.Response:
        lane.mode, _, extra = request.query["mode"].partition("+")
        coalescer.enabled = extra == "co"
        return web.json_response({"mode": lane.mode, "coalesce": coalescer.enabled})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({**lane.stats, "connections": len(lane.conns)})

    async def reset(request: web.Request) -> web.Response:
        lane.stats.clear()
        lane.conns.clear()
        return web.json_response({})

    app.router.add_post("/proto/mode", mode)
    app.router.add_get("/proto/stats", stats)
    app.router.add_post("/proto/reset", reset)
    runner = BoundaryRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    collector.freeze_startup()
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(
        lambda: HandoffServer(_handoff_ops(node), lane.stats), lane.sock_path(a.lane))
    sites = [web.TCPSite(runner, HOST, a.private_port, reuse_address=True)]
    if a.shared_port:
        sites.append(web.TCPSite(runner, HOST, a.shared_port, reuse_port=True))
    for site in sites:
        await site.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        server.close()
        await runner.cleanup()
        await node.stop()


def lane_command(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.lanes_proto lane")
    p.add_argument("--group", required=True)
    p.add_argument("--lane", type=int, required=True)
    p.add_argument("--lanes", type=int, required=True)
    p.add_argument("--mode", default="key", choices=("key", "none", "all", "front"))
    p.add_argument("--db", required=True)
    p.add_argument("--private-port", type=int, required=True)
    p.add_argument("--shared-port", type=int, default=0)
    p.add_argument("--sock-dir", required=True)
    p.add_argument("--core", default=None, help="front mode: the core lane's socket")
    a = p.parse_args(argv)
    from daemon.runtime import collector

    collector.tune()
    try:
        import uvloop

        uvloop.run(_lane_main(a))
    except ImportError:  # pragma: no cover
        asyncio.run(_lane_main(a))


# --- the driver --------------------------------------------------------------------


@dataclass
class System:
    """One configuration under test: processes, the port clients use, the mode."""

    name: str
    procs: list[Any]  # bench.procs.ServerProc
    url: str
    mode: str | None = None  # the hand-off rule to set on every process first
    watched: list[Any] = field(default_factory=list)  # processes whose CPU counts


def _lane_proc(workdir: Path, group: str, lane: int, lanes: int, mode: str, shared: int,
               core: str | None = None) -> Any:
    from bench.procs import ServerProc, free_ports

    private = free_ports(1)[0]
    name = f"{group}-{lane}"
    argv = [sys.executable, "-m", "bench.lanes_proto", "lane", "--group", group,
            "--lane", str(lane), "--lanes", str(lanes), "--mode", mode,
            "--db", str(workdir / f"{name}.db"), "--private-port", str(private),
            "--shared-port", str(shared), "--sock-dir", str(workdir)]
    if core:
        argv += ["--core", core]
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return ServerProc(name, argv, shared or private, workdir / f"{name}.log", env=env,
                      health_port=private)


def _control(proc: Any, path: str, method: str = "POST") -> Any:
    import urllib.request

    req = urllib.request.Request(f"http://{HOST}:{proc.health_port}{path}", method=method,
                                 data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def build_systems(workdir: Path, names: list[str]) -> list[System]:
    from bench.procs import HOST as PHOST
    from bench.procs import free_ports

    out: list[System] = []
    for name in names:
        port = free_ports(1)[0]
        url = f"http://{PHOST}:{port}"
        if name == "serve":  # the unchanged daemon, to check the prototype's one lane against
            from bench.procs import ServerProc, ai_memory_bin

            argv = [ai_memory_bin(), "serve", "--host", PHOST, "--port", str(port),
                    "--db", str(workdir / "serve.db"), "--node-id", "serve"]
            sp = ServerProc("serve", argv, port, workdir / "serve.log")
            out.append(System("serve", [sp], url, None, [sp]))
        elif name == "one":
            p = _lane_proc(workdir, "one", 0, 1, "key", port)
            out.append(System("one", [p], url, "key", [p]))
        elif name.startswith("lanes2:"):
            group = "l2"
            existing = next((s for s in out if s.name.startswith("lanes2:")), None)
            if existing is not None:
                out.append(System(name, [], existing.url, name.split(":")[1], existing.watched))
                continue
            procs = [_lane_proc(workdir, group, i, 2, "key", port) for i in range(2)]
            out.append(System(name, procs, url, name.split(":")[1], procs))
        elif name.startswith("one+"):
            base = next((x for x in out if x.name == "one"), None)
            if base is None:
                raise SystemExit("one+... needs one before it in --systems")
            out.append(System(name, [], base.url, "key+" + name.split("+")[1], base.watched))
        elif name.startswith("front"):
            fronts = int(name[len("front"):])
            core = _lane_proc(workdir, f"core{fronts}", 0, 1, "key", 0)
            core_sock = os.path.join(str(workdir), f"core{fronts}-0.sock")
            procs = [_lane_proc(workdir, f"front{fronts}", i, fronts, "front", port, core_sock)
                     for i in range(fronts)]
            out.append(System(name, [core, *procs], url, None, [core, *procs]))
        else:
            raise SystemExit(f"unknown system {name!r}")
    return out


def _switches(pid: int) -> dict[str, float]:
    """Voluntary context switches so far: of the event loop's thread (each is
    a pass of the loop that found nothing to do and slept) and of the others."""
    out = {"loop sleeps": 0.0, "other sleeps": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/task/{tid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        key = "loop sleeps" if int(tid) == pid else "other sleeps"
                        out[key] += float(line.split()[1])
    return out


def _measure(pool: Any, system: System, seconds: float, warmup: float, concurrency: int,
             agents: int, rate: float = 0.0) -> dict[str, Any]:
    from bench.cpu import cpu_summary
    from bench.loadgen import LoadJob
    from bench.stats import summarize
    from bench.workloads import WorkloadSpec

    proto = system.name != "serve"
    for p in system.watched:
        if system.mode is not None:
            _control(p, f"/proto/mode?mode={quote(system.mode)}")
        if proto:
            _control(p, "/proto/reset")
    from bench.hotpath import work_counters

    def counters() -> dict[str, float]:
        out: dict[str, float] = {}
        for p in system.watched:
            for k, v in work_counters(f"http://{HOST}:{p.health_port or p.port}").items():
                out[k] = out.get(k, 0.0) + v
            for k, v in _switches(p.pid).items():
                out[k] = out.get(k, 0.0) + v
        return out

    before = counters()
    load0 = os.getloadavg()[0]
    job = LoadJob(WorkloadSpec("notify", agents=agents), (system.url,),
                  mode="open" if rate else "closed", rate=rate, connections=concurrency,
                  concurrency=concurrency, duration_s=seconds, warmup_s=warmup, client="raw",
                  cpu_pids=tuple((p.name, p.pid) for p in system.watched))
    res = pool.run(job)
    op = res.samples.get("op")
    ok = op.ok if op is not None else 0
    summary = summarize(op, res.elapsed_s) if op is not None else None
    cpu = cpu_summary(res.cpu, ok)
    stats = {p.name: _control(p, "/proto/stats", "GET") for p in system.watched if proto}
    after = counters()
    work = {k: (after[k] - before.get(k, 0.0)) / ok for k in
            ("SQLite commits (writer batches)", "writer jobs", "loop sleeps", "other sleeps")
            if ok and k in after}
    return {
        "system": system.name, "ops": ok, "elapsed_s": res.elapsed_s,
        "rate": ok / res.elapsed_s if res.elapsed_s else 0.0,
        "errors": (op.http_errors + op.unavailable + op.transport_errors) if op else None,
        "p50_ms": summary.p50_ms if summary else None, "p99_ms": summary.p99_ms if summary else None,
        "cpu_ms_per_op": cpu["ms_per_op"] if cpu else None,
        "client_ms_per_op": cpu["client_ms_per_op"] if cpu else None,
        "process_cores": cpu["process_cores"] if cpu else None,
        "process_ms_per_op": ({k: v * 1000.0 * res.elapsed_s / ok
                               for k, v in cpu["process_cores"].items()} if cpu and ok else None),
        "lane_stats": stats, "load1": [load0, os.getloadavg()[0]], "work_per_op": work,
    }


def _latency(pool: Any, system: System, total: int) -> dict[str, Any]:
    from bench.cpu import cpu_summary
    from bench.loadgen import LoadJob
    from bench.stats import summarize
    from bench.workloads import WorkloadSpec

    for p in system.watched:
        if system.mode is not None:
            _control(p, f"/proto/mode?mode={quote(system.mode)}")
    job = LoadJob(WorkloadSpec("notify", agents=64), (system.url,), mode="count",
                  concurrency=1, total=total, client="raw",
                  cpu_pids=tuple((p.name, p.pid) for p in system.watched))
    res = pool.run(job)
    s = summarize(res.samples["op"], res.elapsed_s)
    cpu = cpu_summary(res.cpu, s.ok)
    return {"system": system.name, "p50_ms": s.p50_ms, "p99_ms": s.p99_ms, "ops": s.ok,
            "cpu_ms_per_op": cpu["ms_per_op"] if cpu else None, "load1": os.getloadavg()[0]}


def _pairs(values: list[float]) -> list[float]:
    """Round k and its reverse k+1 averaged: the drift over a pair cancels."""
    return [(values[i] + values[i + 1]) / 2 for i in range(0, len(values) - 1, 2)]


def run_command(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.lanes_proto run")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--agents", type=int, default=64)
    p.add_argument("--latency-ops", type=int, default=1500)
    p.add_argument("--systems", default="one,lanes2:key,lanes2:none,lanes2:all,front1")
    p.add_argument("--open-rate", type=float, default=0.0,
                   help="also offer this many notifies/s to each system (open loop)")
    p.add_argument("--open-rounds", type=int, default=4)
    p.add_argument("--out", default="")
    p.add_argument("--keep", action="store_true", help="keep the databases and logs")
    a = p.parse_args(argv)
    from bench.procs import REAPER

    names = a.systems.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="lanes-proto-"))
    systems = build_systems(workdir, names)
    procs = [proc for s in systems for proc in s.procs]
    REAPER.install()
    results: list[dict[str, Any]] = []
    latencies: list[dict[str, Any]] = []
    opened: list[dict[str, Any]] = []
    print(f"workdir {workdir}; load average {os.getloadavg()}", flush=True)
    with contextlib.ExitStack() as stack:
        if not a.keep:
            stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        _drive(a, systems, procs, results, latencies, opened)
    report = summarize_runs(results, latencies, names)
    if opened:
        report += (f"\n\nOpen loop at {a.open_rate:,.0f} notifies/s offered:\n"
                   + summarize_runs(opened, [], names))
    print(report)
    if a.out:
        Path(a.out).write_text(json.dumps({"runs": results, "open": opened,
                                           "latency": latencies, "report": report}, indent=1))


def _drive(a: argparse.Namespace, systems: list[System], procs: list[Any],
           results: list[dict[str, Any]], latencies: list[dict[str, Any]],
           opened: list[dict[str, Any]]) -> None:
    from bench.loadgen import LoadPool
    from bench.procs import running_all

    with LoadPool(1) as pool, running_all(procs):
        for s in systems:  # a short warm-up of each, outside the figures
            _measure(pool, s, 1.0, 0.5, a.concurrency, a.agents)
        for r in range(a.rounds):
            order = systems if r % 2 == 0 else list(reversed(systems))
            for s in order:
                m = _measure(pool, s, a.seconds, a.warmup, a.concurrency, a.agents)
                m["round"] = r
                results.append(m)
                print(json.dumps({k: m[k] for k in ("round", "system", "rate", "cpu_ms_per_op",
                                                    "client_ms_per_op", "p99_ms", "errors",
                                                    "load1", "work_per_op")}), flush=True)
        for r in range(a.open_rounds if a.open_rate else 0):
            order = systems if r % 2 == 0 else list(reversed(systems))
            for s in order:
                m = _measure(pool, s, a.seconds, 0.0, a.concurrency, a.agents, a.open_rate)
                m["round"] = r
                opened.append(m)
                print(json.dumps({k: m[k] for k in ("round", "system", "rate", "cpu_ms_per_op",
                                                    "p99_ms", "errors", "load1",
                                                    "work_per_op")}), flush=True)
        for s in systems:
            if a.latency_ops and s.name in ("one", "lanes2:none", "lanes2:all", "lanes2:key", "front1"):
                latencies.append(_latency(pool, s, a.latency_ops))
                print(json.dumps(latencies[-1]), flush=True)


def summarize_runs(results: list[dict[str, Any]], latencies: list[dict[str, Any]],
                   names: list[str]) -> str:
    by: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for m in results:
        by[m["system"]].append(m)
    lines = ["| system | notifies/s per round | median | CPU ms/notify per round (median) | "
             "per process ms/notify (median round) | handed over | client connections "
             "per process |", "|---|---|---|---|---|---|---|"]
    for n in names:
        ms = sorted(by[n], key=lambda m: m["round"])
        rates = [m["rate"] for m in ms]
        cpus = [m["cpu_ms_per_op"] for m in ms if m["cpu_ms_per_op"]]
        mid = sorted(ms, key=lambda m: m["rate"])[len(ms) // 2]
        per = mid["process_ms_per_op"] or {}
        handed = sum(st.get("handed", 0) for st in mid["lane_stats"].values())
        served = sum(st.get("served", 0) for st in mid["lane_stats"].values())
        share = handed / (handed + served) if handed + served else 0.0
        conns = "/".join(str(st.get("connections", 0)) for st in mid["lane_stats"].values())
        lines.append(f"| {n} | {', '.join(f'{x:,.0f}' for x in rates)} | "
                     f"{statistics.median(rates):,.0f} | "
                     f"{', '.join(f'{x:.3f}' for x in cpus)} ({statistics.median(cpus):.3f}) | "
                     f"{', '.join(f'{k} {v:.3f}' for k, v in per.items())} | {share:.0%} | "
                     f"{conns} |")
    base = [m["rate"] for m in sorted(by.get("one", []), key=lambda m: m["round"])]
    for n in names:
        if n == "one" or not base:
            continue
        other = [m["rate"] for m in sorted(by[n], key=lambda m: m["round"])]
        ratios = [o / b for o, b in zip(_pairs(other), _pairs(base), strict=False) if b]
        if ratios:
            lines.append(f"\n{n} / one, per pair of rounds: "
                         f"{', '.join(f'{x:.2f}' for x in ratios)} (median "
                         f"{statistics.median(ratios):.2f})")
    def cpu_pairs(n: str) -> list[float]:
        return _pairs([m["cpu_ms_per_op"] or 0.0 for m in sorted(by.get(n, []),
                                                                 key=lambda m: m["round"])])

    if "lanes2:all" in by and "lanes2:none" in by:
        hop = [a - b for a, b in zip(cpu_pairs("lanes2:all"), cpu_pairs("lanes2:none"),
                                     strict=False)]
        if hop:
            lines.append(f"\nhand-off CPU per handed notify (all - none), per pair: "
                         f"{', '.join(f'{x:.3f}' for x in hop)} ms (median "
                         f"{statistics.median(hop):.3f})")
    for n in names:
        if n == "one" or "one" not in by:
            continue
        rel = [o / b for o, b in zip(cpu_pairs(n), cpu_pairs("one"), strict=False) if b]
        if rel:
            lines.append(f"CPU per notify, {n} / one, per pair: "
                         f"{', '.join(f'{x:.2f}' for x in rel)} (median {statistics.median(rel):.2f})")
    if latencies:
        lines.append("\n| system | one client, sequential: p50 | p99 | CPU ms/notify |"
                     "\n|---|---|---|---|")
        lines += [f"| {x['system']} | {x['p50_ms']:.3f} ms | {x['p99_ms']:.3f} ms | "
                  f"{x['cpu_ms_per_op'] or 0:.3f} |" for x in latencies]
    loads = [m["load1"][0] for m in results]
    if loads:
        lines.append(f"\nload average (1 min) at the start of the runs: "
                     f"{min(loads):.2f}-{max(loads):.2f}; cores {os.cpu_count()}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    usage = ("usage: python -m bench.lanes_proto {run,lane} ...\n"
             "  run   the prototype's measurement (run --help for its options)\n"
             "  lane  one lane process, started by run")
    if args[:1] in (["-h"], ["--help"]):
        print(usage)
        return
    if not args or args[0] not in ("lane", "run"):
        raise SystemExit(usage)
    with contextlib.suppress(KeyboardInterrupt):
        (lane_command if args[0] == "lane" else run_command)(args[1:])


if __name__ == "__main__":
    main()
