"""The measured phases, each returning a plain JSON-ready dict.

:func:`measure_workload` finds a workload's maximum with a closed loop
(``profile.concurrency`` clients for ``max_duration_s``) and then offers it
open-loop at fixed fractions of that maximum, which gives the
latency-versus-throughput curve. :func:`setup_projects` starts the sessions
that make the send+pop mailboxes exist. :func:`catchup_inbox_rss` is the
one long scenario on the 3-node cluster whose single fill serves three
measurements: with one node stopped it fills inboxes of every size through
the other two (those writes are the operations the stopped node misses),
restarts it and times its catch-up, reads the inboxes (maximum rate, then
one client's latency), and reads each
node's RSS with all of it stored.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

from bench.cpu import cpu_summary
from bench.loadgen import LoadJob, LoadPool, LoadResult
from bench.procs import Cluster, post_json
from bench.profiles import Profile
from bench.progress import Progress
from bench.stats import summarize
from bench.workloads import WorkloadSpec

POLL_S = 0.1


def result_dict(r: LoadResult, *, offered_rps: float | None = None, claims: bool = False) -> dict[str, Any]:
    """Summary of whole operations plus one per request kind, and (when the
    job watched the servers' pids) the servers' CPU per acknowledged
    operation: per claim for send+pop, per successful operation otherwise."""
    op = r.samples.get("op")
    if op is None:
        raise RuntimeError("the load job completed no operation")
    ops = op.events.get("claimed", 0) if claims else None
    out = summarize(op, r.elapsed_s, offered_rps=offered_rps, ops=ops).to_dict()
    out["kinds"] = {
        k: summarize(s, r.elapsed_s).to_dict() for k, s in sorted(r.samples.items()) if k != "op"
    }
    out["cpu"] = cpu_summary(r.cpu, ops if ops is not None else op.ok)
    return out


def throughput(d: dict[str, Any]) -> float:
    """The unit a workload is judged by: claims/s when counted, else ok ops/s."""
    ops = d.get("ops_per_s")
    return float(ops if ops is not None else d["rps"])


def measure_workload(
    pool: LoadPool,
    progress: Progress,
    profile: Profile,
    label: str,
    urls: tuple[str, ...],
    spec: WorkloadSpec,
    cpu_pids: tuple[tuple[str, int], ...] = (),
) -> dict[str, Any]:
    """The maximum and the sweep; ``cpu_pids`` are the (name, pid) of every
    server process whose CPU counts for this workload (all nodes)."""
    claims = spec.name == "sendpop"
    job = LoadJob(
        spec, urls, mode="closed", concurrency=profile.concurrency,
        duration_s=profile.max_duration_s, warmup_s=profile.warmup_s, cpu_pids=cpu_pids,
        client=profile.client,
    )
    with progress.step(f"{label} · {spec.name} · max") as update:
        best = result_dict(pool.run(job, update), claims=claims)
    out: dict[str, Any] = {"cluster": label, "workload": spec.name, "max": best, "sweep": []}
    top = best["rps"]  # ok ops/s: what the open loop offers fractions of
    if top <= 0:
        out["sweep_skipped"] = "no successful operation at maximum load"
        return out
    for frac in profile.sweep_fractions:
        rate = top * frac
        ojob = replace(
            job, mode="open", rate=rate, duration_s=profile.sweep_duration_s, warmup_s=0.0,
            max_inflight=max(profile.concurrency * 16, 256),
        )
        with progress.step(f"{label} · {spec.name} · {frac:.0%}", total=int(rate * profile.sweep_duration_s)) as update:
            point = result_dict(pool.run(ojob, update), offered_rps=rate, claims=claims)
        point["fraction"] = frac
        out["sweep"].append(point)
    return out


def paired_rounds(
    pool: LoadPool,
    progress: Progress,
    profile: Profile,
    systems: list[tuple[str, tuple[str, ...], tuple[tuple[str, int], ...], WorkloadSpec]],
) -> dict[str, Any]:
    """The maximum of each system, measured one right after another, in
    ``profile.paired_rounds`` rounds whose order is reversed every round.

    ``systems`` are (label, urls, cpu_pids, spec), all running. The ratio
    targets compare systems that the other phases measure minutes apart,
    and on a shared machine the speed of the same work drifts by tens of
    percent over minutes; a round takes seconds, and a round with the next
    one (reversed) gives every system the same mean time, so a steady drift
    cancels out of their ratios (:func:`bench.targets.paired_series`).
    Each burst is a closed loop of ``max_duration_s``."""
    rounds: list[dict[str, Any]] = []
    for i in range(profile.paired_rounds):
        order = systems if i % 2 == 0 else systems[::-1]
        this: dict[str, Any] = {"order": [label for label, *_ in order], "max": {}}
        for label, urls, pids, spec in order:
            job = LoadJob(spec, urls, mode="closed", concurrency=profile.concurrency,
                          duration_s=profile.max_duration_s, warmup_s=profile.warmup_s, cpu_pids=pids,
                          client=profile.client)
            with progress.step(f"paired {i + 1}/{profile.paired_rounds} · {label} · {spec.name}") as update:
                res = result_dict(pool.run(job, update))
            res.pop("kinds", None)
            this["max"][label] = res
        rounds.append(this)
    return {"workload": "notify", "rounds": rounds}


def setup_projects(urls: tuple[str, ...], spec: WorkloadSpec) -> None:
    """Start a session in every project the send+pop workload uses."""
    for project in (*spec.projects, spec.sender_project):
        body = {
            "workspace": spec.workspace, "project": project, "harness": "bench",
            "session_id": f"bench-{project}-{uuid.uuid4().hex[:8]}",
        }
        status, answer = post_json(urls[0] + "/api/v1/sessions", body, headers={"X-Agent-Id": "bench-mailer"})
        if status not in (200, 201):
            raise RuntimeError(f"POST /api/v1/sessions for {project}: {status} {answer}")


def vv_of(cluster: Cluster, i: int) -> dict[str, int]:
    """A node's version vector, without zero entries (absent means zero)."""
    return {str(k): int(v) for k, v in cluster.status(i).get("vv", {}).items() if int(v) > 0}


def vv_total(vv: dict[str, int]) -> int:
    return sum(vv.values())


def wait_converged(
    cluster: Cluster, nodes: list[int], timeout_s: float, on_progress: Any = None, start_total: int = 0
) -> float | None:
    """Seconds until every listed node reports the same version vector.

    ``on_progress`` gets how far the lowest node has come past
    ``start_total`` operations. None when ``timeout_s`` runs out first.
    """
    t0 = time.monotonic()
    while True:
        try:
            vvs = [vv_of(cluster, i) for i in nodes]
        except OSError:
            vvs = []
        if vvs:
            if on_progress is not None:
                on_progress(max(min(vv_total(v) for v in vvs) - start_total, 0))
            if all(v == vvs[0] for v in vvs):
                return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            return None
        time.sleep(POLL_S)


def catchup_inbox_rss(
    pool: LoadPool, progress: Progress, profile: Profile, cluster: Cluster, nominal_big: int
) -> dict[str, Any]:
    out: dict[str, Any] = {"cluster": cluster.label}
    everyone = list(range(cluster.size))
    lagger = cluster.size - 1
    live = tuple(n.url for i, n in enumerate(cluster.nodes) if i != lagger)
    settled = wait_converged(cluster, everyone, profile.converge_timeout_s)
    if settled is None:
        raise RuntimeError("the cluster did not converge before the catch-up phase")
    before = vv_of(cluster, lagger)
    cluster.nodes[lagger].stop()

    fills = []
    for size in profile.inbox_sizes:
        spec = WorkloadSpec("notify", notify_target=f"bench-inbox-{size}")
        job = LoadJob(spec, live, mode="count", total=size, concurrency=profile.fill_concurrency,
                      client=profile.client)
        with progress.step(f"fill inbox {size:,} ({cluster.size - 1} of {cluster.size} nodes up)", total=size) as update:
            r = pool.run(job, update)
        d = result_dict(r)
        d["size"] = size
        fills.append(d)
    out["fill"] = fills
    stored = {f["size"]: f["ok"] for f in fills}  # what each inbox really holds

    ahead = [vv_of(cluster, i) for i in everyone if i != lagger]
    target = {o: max(v.get(o, 0) for v in ahead) for v in ahead for o in v}
    missed = sum(max(target[o] - before.get(o, 0), 0) for o in target)
    out["catchup"] = {"missed_ops": missed, "nominal_ops": nominal_big}
    with progress.step(f"catch-up of {missed:,} missed ops", total=missed, unit="op") as update:
        t0 = time.monotonic()
        cluster.nodes[lagger].start()
        t_up = time.monotonic() - t0
        took = wait_converged(
            cluster, everyone, profile.converge_timeout_s, on_progress=update, start_total=vv_total(before)
        )
    out["catchup"].update(
        restart_to_healthy_s=t_up,
        healthy_to_converged_s=took,
        restart_to_converged_s=None if took is None else t_up + took,
        timeout_s=profile.converge_timeout_s,
    )

    reads = []
    for consistency in profile.inbox_consistencies:
        for size in profile.inbox_sizes:
            spec = WorkloadSpec(
                "inbox", inbox_agent=f"bench-inbox-{size}",
                consistency=None if consistency == "default" else consistency,
            )
            row = _inbox_reads(pool, progress, profile, cluster, spec, size, consistency)
            row["stored"] = stored[size]
            reads.append(row)
    out["inbox"] = reads

    out["rss_bytes"] = cluster.rss()
    out["db_bytes"] = {
        n.name: sum(p.stat().st_size for p in cluster.workdir.glob(f"{n.name}.db*")) for n in cluster.nodes
    }
    out["messages_stored"] = sum(stored.values())
    return out


def _inbox_reads(
    pool: LoadPool, progress: Progress, profile: Profile, cluster: Cluster,
    spec: WorkloadSpec, size: int, consistency: str,
) -> dict[str, Any]:
    """Maximum read rate with several clients, then one client's latency.

    The latency that the target judges is taken from one client reading
    sequentially (after the maximum phase warmed the caches), so it shows
    what inbox size alone costs a read, with enough reads for a p99 even
    when a read is slow (``inbox_reads``, cut off at ``inbox_max_s``).
    """
    job = LoadJob(spec, cluster.urls, mode="closed", concurrency=profile.inbox_concurrency,
                  duration_s=profile.inbox_duration_s, warmup_s=profile.warmup_s, client=profile.client)
    with progress.step(f"inbox {size:,} ({consistency}) · max") as update:
        best = result_dict(pool.run(job, update))
    seq = LoadJob(spec, cluster.urls, mode="count", concurrency=1, total=profile.inbox_reads,
                  deadline_s=profile.inbox_max_s, client=profile.client)
    with progress.step(f"inbox {size:,} ({consistency}) · 1 client", total=profile.inbox_reads) as update:
        one = result_dict(pool.run(seq, update))
    return {"size": size, "consistency": consistency, "max": best, "sequential": one}
