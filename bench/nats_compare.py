"""Side by side: the same send+pop against a 3-server NATS JetStream.

It runs in every profile. It needs ``nats-server`` (Debian package, which
``make bench`` installs when it may) and the ``nats-py`` client (the bench
extra); without either it returns ``{"skipped": reason}``, which the report
and the NATS target show.
Three servers form one JetStream cluster on loopback; one file-backed
work-queue stream with three replicas takes ``mail.<project>`` subjects,
and each project has its own durable pull consumer with explicit acks
(a work-queue stream deletes a message once acked, which is the claim).
Each client owns one project (clients are spread evenly over them) and its
own pull subscription; one operation publishes to that project, then
fetches one message from the project's consumer and acks it synchronously, the closest
JetStream counterpart of POST /messages + POST /messages/pop; it is timed
and counted exactly like the HTTP workload, from the same pool of
load-generator processes. The three servers' CPU over the window is read
from /proc as for the daemon, so the CPU per claim compares too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.cpu import CpuProbe
from bench.loadgen import LoadPool, LoadResult, add_progress
from bench.phases import result_dict
from bench.procs import HOST, ServerProc, free_ports, running_all
from bench.profiles import Profile
from bench.progress import Progress
from bench.stats import Sample

STREAM = "BENCH_MAIL"
FETCH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class NatsJob:
    servers: tuple[str, ...]
    projects: tuple[str, ...]
    concurrency: int
    duration_s: float
    warmup_s: float
    payload_bytes: int = 160
    seed: int = 1
    start_at: float = 0.0
    cpu_pids: tuple[tuple[str, int], ...] = ()

    def split(self, parts: int) -> list[NatsJob]:
        return [
            replace(self, concurrency=self.concurrency // parts + (1 if i < self.concurrency % parts else 0),
                    seed=self.seed * 1000 + i)
            for i in range(parts)
            if self.concurrency // parts + (1 if i < self.concurrency % parts else 0) > 0
        ]


def nats_server_bin() -> str | None:
    """``nats-server`` on PATH, else where Debian puts it (/usr/sbin is not
    on every user's PATH)."""
    found = shutil.which("nats-server")
    if found is None and Path("/usr/sbin/nats-server").exists():
        found = "/usr/sbin/nats-server"
    return found


def missing() -> str | None:
    """Why the comparison cannot run here, or None."""
    if nats_server_bin() is None:
        return "nats-server is not installed (run: apt-get install -y nats-server)"
    if importlib.util.find_spec("nats") is None:
        return "the nats-py client is not installed (run: .venv/bin/pip install -e '.[bench]')"
    return None


def _config(name: str, port: int, cport: int, mport: int, routes: list[int], store: Path) -> str:
    route_list = ", ".join(f"nats-route://{HOST}:{r}" for r in routes)
    return (
        f'server_name: "{name}"\nlisten: "{HOST}:{port}"\nhttp: "{HOST}:{mport}"\n'
        f'jetstream {{ store_dir: "{store}", max_memory_store: 268435456, max_file_store: 2147483648 }}\n'
        f'cluster {{ name: "bench", listen: "{HOST}:{cport}", routes: [{route_list}] }}\n'
    )


def nats_servers(workdir: Path) -> list[ServerProc]:
    ports = free_ports(9)
    client, cluster, monitor = ports[0:3], ports[3:6], ports[6:9]
    procs = []
    for i in range(3):
        name = f"nats{i + 1}"
        conf = workdir / f"{name}.conf"
        conf.write_text(_config(name, client[i], cluster[i], monitor[i],
                                [c for j, c in enumerate(cluster) if j != i], workdir / name))
        procs.append(ServerProc(name, [nats_server_bin() or "nats-server", "-c", str(conf)],
                                client[i], workdir / f"{name}.log", health_path="/healthz",
                                health_port=monitor[i]))
    return procs


async def _setup(servers: tuple[str, ...], projects: tuple[str, ...], timeout_s: float = 30.0) -> None:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
    from nats.js.errors import Error as JsError

    nc = await nats.connect(servers=list(servers))
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + timeout_s
        while True:  # the meta leader needs a moment after the cluster forms
            try:
                await js.add_stream(StreamConfig(
                    name=STREAM, subjects=["mail.>"], retention=RetentionPolicy.WORK_QUEUE,
                    storage=StorageType.FILE, num_replicas=3,
                ))
                break
            except (JsError, nats.errors.TimeoutError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        for p in projects:
            await js.add_consumer(STREAM, ConsumerConfig(
                durable_name=p, filter_subject=f"mail.{p}", ack_policy=AckPolicy.EXPLICIT,
            ))
    finally:
        await nc.close()


async def _run_async(job: NatsJob) -> LoadResult:
    import nats

    conns = [await nats.connect(servers=[s]) for s in job.servers]
    samples: dict[str, Sample] = {k: Sample() for k in ("op", "send", "pop")}
    done = 0
    try:
        # One pull subscription per worker: concurrent fetches on a shared
        # subscription would take each other's messages and time out.
        subs = []
        for k in range(job.concurrency):
            p = job.projects[(job.seed + k) % len(job.projects)]
            js = conns[k % len(conns)].jetstream()
            subs.append((p, await js.pull_subscribe(f"mail.{p}", durable=p, stream=STREAM)))
        delay = job.start_at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        t_measure = time.perf_counter() + job.warmup_s
        t_end = t_measure + job.duration_s
        probe = CpuProbe(job.cpu_pids)
        asyncio.get_running_loop().call_later(job.warmup_s, probe.open)

        async def worker(k: int) -> None:
            nonlocal done
            p, sub = subs[k]
            js = conns[k % len(conns)].jetstream()
            body = b"x" * job.payload_bytes
            while (start := time.perf_counter()) < t_end:
                rec = start >= t_measure
                status = 200
                try:
                    t0 = time.perf_counter()
                    await js.publish(f"mail.{p}", body)
                    if rec:
                        samples["send"].record(201, (time.perf_counter() - t0) * 1000.0)
                    t1 = time.perf_counter()
                    msgs = await sub.fetch(1, timeout=FETCH_TIMEOUT_S)
                    await msgs[0].ack_sync()
                    if rec:
                        samples["pop"].record(200, (time.perf_counter() - t1) * 1000.0)
                        samples["op"].count("claimed")
                except (TimeoutError, nats.errors.Error, IndexError) as e:
                    status = 599
                    if rec:
                        samples["op"].count(f"error:{type(e).__name__}")
                if rec:
                    lat = (time.perf_counter() - start) * 1000.0
                    if status == 200:
                        samples["op"].record(200, lat)
                    else:
                        samples["op"].record_transport_error(lat)
                done += 1
                if done % 100 == 0:
                    add_progress(100)

        await asyncio.gather(*(worker(k) for k in range(job.concurrency)))
        elapsed = time.perf_counter() - t_measure
        cpu = probe.close()
    finally:
        for nc in conns:
            await nc.close()
    return LoadResult(samples=samples, elapsed_s=elapsed, ops_started=done, cpu=cpu)


def run_nats_job(job: NatsJob) -> LoadResult:
    """Worker-process entry point for the JetStream load."""
    return asyncio.run(_run_async(job))


def run(pool: LoadPool, progress: Progress, profile: Profile, workdir: Path) -> dict[str, Any]:
    reason = missing()
    if reason is not None:
        progress.note(f"[bench] NATS comparison skipped: {reason}")
        return {"skipped": reason}
    base = workdir / "nats"
    base.mkdir(parents=True, exist_ok=True)
    projects = tuple(f"p{i}" for i in range(profile.projects))
    servers = nats_servers(base)
    with running_all(servers):
        urls = tuple(f"nats://{HOST}:{s.port}" for s in servers)
        asyncio.run(_setup(urls, projects))
        job = NatsJob(urls, projects, profile.concurrency, profile.max_duration_s, profile.warmup_s,
                      cpu_pids=tuple((s.name, s.pid) for s in servers))
        with progress.step("NATS JetStream R3 · send+pop · max") as update:
            r = pool.run(job, update, runner=run_nats_job)
    out = {"system": "NATS JetStream work-queue stream, R3, 3 servers", "max": result_dict(r, claims=True)}
    return out
