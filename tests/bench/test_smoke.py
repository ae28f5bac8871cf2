"""Smoke test of the benchmark harness: stats, targets, report, plots, and
a few hundred requests against the echo ceiling through the real load
generator (in-process, so the test stays fast)."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench import plots, report
from bench.cpu import CLK_TCK, CpuWindow, cpu_summary, cpu_ticks, merge_windows
from bench.loadgen import LoadJob, run_job
from bench.procs import echo_server, running
from bench.progress import Progress
from bench.stats import Sample, merge_samples, percentile, summarize
from bench.targets import evaluate
from bench.workloads import WorkloadSpec


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(values, 0)


def test_summary_counts_503_apart_and_merges_processes() -> None:
    a, b = Sample(), Sample()
    for i in range(90):
        a.record(201, float(i))
    for _ in range(5):
        b.record(503, 1.0)
    b.record(404, 2.0)
    b.record_transport_error(3.0)
    b.count("claimed", 4)
    merged = merge_samples([{"op": a}, {"op": b}])["op"]
    s = summarize(merged, 2.0, ops=merged.events["claimed"])
    assert (s.requests, s.ok, s.unavailable, s.http_errors, s.transport_errors) == (97, 90, 5, 1, 1)
    assert s.errors == 2
    assert s.rps == 45.0
    assert s.ops_per_s == 2.0
    assert s.max_ms == 89.0
    assert s.statuses == {"201": 90, "404": 1, "503": 5}


def _point(rps: float, p99: float, fraction: float | None = None, ops: float | None = None,
           cpu_ms: float | None = None) -> dict[str, Any]:
    s = Sample()
    for _ in range(10):
        s.record(201, p99)
    d = summarize(s, 1.0).to_dict()
    d.update(rps=rps, p50_ms=p99 / 2, p99_ms=p99, ops_per_s=ops, offered_rps=rps, fraction=fraction, kinds={})
    if cpu_ms is not None:
        n = int(ops if ops is not None else rps)
        w = CpuWindow(0.0, 1.0, {"node1": (0, 0)}, {"node1": (round(cpu_ms * n * CLK_TCK / 1000), 0)}, 0)
        d["cpu"] = cpu_summary(w, n)
    return d


def _results() -> dict[str, Any]:
    three, one = "3 nodes W=2", "1 node"
    sweep = [_point(100.0 * f, 4.0 + 30 * f, f) for f in (0.1, 0.5, 1.0)]
    slow = [_point(100.0 * f, 4.0 + 60 * f, f) for f in (0.1, 0.5, 1.0)]
    inbox = [
        {"size": 1000, "consistency": "default", "max": _point(900, 3.0), "sequential": _point(300, 3.0)},
        {"size": 20000, "consistency": "default", "max": _point(800, 8.0), "sequential": _point(120, 8.0)},
    ]
    return {
        "meta": {"run_id": "t", "profile": "quick", "commit": "abc", "daemon_version": "0", "cores": 2,
                 "profile_settings": {"concurrency": 64, "loadgen_procs": 1, "inbox_sizes": [1000, 20000]}},
        "echo": {"cluster": "echo server", "workload": "notify body", "max": _point(1000.0, 5.0, cpu_ms=0.1),
                 "sweep": sweep},
        "workloads": [
            {"cluster": one, "workload": "notify", "max": _point(800.0, 20.0, cpu_ms=0.2), "sweep": sweep},
            {"cluster": three, "workload": "notify", "max": _point(600.0, 30.0, cpu_ms=0.5), "sweep": sweep},
            {"cluster": three, "workload": "sendpop", "max": _point(700.0, 40.0, ops=700.0, cpu_ms=0.9),
             "sweep": slow},
        ],
        "nats": {"system": "NATS", "max": _point(1500.0, 10.0, ops=1500.0, cpu_ms=0.3)},
        "scenario": {
            "cluster": three, "inbox": inbox, "fill": [_point(1000, 5.0)],
            "catchup": {"missed_ops": 21000, "nominal_ops": 100000, "restart_to_healthy_s": 1.0,
                        "healthy_to_converged_s": 2.0, "restart_to_converged_s": 3.0, "timeout_s": 60.0},
            "rss_bytes": {"node1": 90 * 2**20, "node2": 160 * 2**20}, "db_bytes": {"node1": 2**20},
            "messages_stored": 21000,
        },
        "errors": [],
    }


def test_targets_report_and_plots(tmp_path: Path) -> None:
    results = _results()
    verdicts = {t.name: t.verdict for t in evaluate(results)}
    assert verdicts == {
        "send+pop vs NATS JetStream R3, 3 nodes": "MISS",  # 700 of 1500 = 47 %
        "send+pop claims, 3 nodes": "MISS",  # 700 claims/s
        "cluster CPU per claim, 3 nodes": "PASS",  # 0.9 ms
        "cluster CPU per notify, 3 nodes W=2": "MISS",  # 0.5 ms
        "cluster CPU per notify vs echo CPU per request, 3 nodes W=2": "MISS",  # 0.5 / 0.1 = x5
        "notify throughput, 3 nodes W=2 vs 1 node": "PASS",  # 600 of 800 = 75 %
        "notify throughput, 1 node vs echo": "PASS",  # 800 of 1000
        "lanes: notify throughput, 1 node with 2 lanes vs 1 lane": "SKIP",  # the lanes phase did not run
        "lanes: notify throughput, 2 lanes with a lane-aware client vs 1 lane": "SKIP",
        "notify p99 at half of max, 3 nodes": "PASS",  # 4 + 30 * 0.5 = 19 ms
        "send+pop p99 at half of max, 3 nodes": "MISS",  # 4 + 60 * 0.5 = 34 ms
        "inbox read p99, largest inbox (limit 50)": "MISS",  # 8 ms, but over 2x the 3 ms of 1k
        "catch-up of missed ops": "MISS",  # 3.0 s for 21k ops: over 10 s per 100k, pro rata (2.1 s)
        "RSS per node": "MISS",  # node2 160 MB
    }
    values = {t.name: t.value for t in evaluate(results)}
    assert values["cluster CPU per notify vs echo CPU per request, 3 nodes W=2"] == pytest.approx(5.0)
    assert values["send+pop vs NATS JetStream R3, 3 nodes"] == pytest.approx(700 / 1500)
    del results["echo"]
    after = {t.name: t.verdict for t in evaluate(results)}
    assert after["notify throughput, 1 node vs echo"] == "SKIP"
    assert after["cluster CPU per notify vs echo CPU per request, 3 nodes W=2"] == "SKIP"
    results = _results()
    results["nats"] = {"skipped": "nats-server is not installed"}
    skipped = next(t for t in evaluate(results) if t.name == "send+pop vs NATS JetStream R3, 3 nodes")
    assert skipped.verdict == "SKIP" and "nats-server is not installed" in skipped.measured
    results = _results()
    results["workloads"][1]["max"]["cpu"] = None  # /proc unreadable: SKIP, never PASS
    assert {t.name: t.verdict for t in evaluate(results)}[
        "cluster CPU per notify vs echo CPU per request, 3 nodes W=2"] == "SKIP"
    results = _results()

    run_dir = tmp_path / "results" / "t"
    md = report.write_run(run_dir, results, evaluate(results))
    assert "| 3 nodes W=2 | notify | 600 ops/s | 60% |" in md
    assert "| 3 nodes W=2 | notify (per ok op) | 0.500 | x5.0 |" in md
    assert "| NATS JetStream R3 | send+pop (per claim) | 0.300 | x3.0 |" in md
    assert "**MISS**" in md and "**PASS**" in md
    assert (tmp_path / "results" / "latest.md").read_text().strip() == md.strip()
    saved = json.loads((run_dir / "results.json").read_text())
    assert [t["verdict"] for t in saved["targets"]] == list(verdicts.values())
    assert saved["workloads"][1]["max"]["cpu"]["ms_per_op"] == pytest.approx(0.5)

    doc = tmp_path / "performance.md"
    doc.write_text(f"intro\n{report.DOCS_BEGIN}\nSTALE-TABLE\n{report.DOCS_END}\noutro\n")
    assert report.update_docs(doc, md)
    text = doc.read_text()
    assert "STALE-TABLE" not in text and text.startswith("intro\n") and text.endswith("outro\n") and md in text

    made = plots.draw_all(results, run_dir)
    assert [p.name for p in made] == ["latency_vs_throughput.png", "inbox_latency_vs_size.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in made)


def test_echo_ceiling_few_hundred_requests(tmp_path: Path) -> None:
    with running(echo_server(tmp_path)) as srv:
        result = run_job(LoadJob(WorkloadSpec("echo"), (srv.url,), mode="count", total=300, concurrency=16))
        opened = run_job(LoadJob(WorkloadSpec("echo"), (srv.url,), mode="open", rate=400.0, duration_s=0.5,
                                 connections=8))
    op = summarize(result.samples["op"], result.elapsed_s)
    assert (op.requests, op.ok, op.errors, op.unavailable) == (300, 300, 0, 0)
    assert result.cpu is None  # no pids named, no CPU figure
    assert result.samples["echo"].statuses == {201: 300}
    assert 0 < op.p50_ms <= op.p99_ms <= op.max_ms
    assert op.rps > 0
    o = summarize(opened.samples["op"], opened.elapsed_s, offered_rps=400.0)
    assert o.ok == 200 and o.dropped == 0


def test_jobs_split_across_processes_without_empty_parts() -> None:
    spec = WorkloadSpec("echo")
    closed = LoadJob(spec, ("http://127.0.0.1:1",), concurrency=5).split(2)
    assert [j.concurrency for j in closed] == [3, 2] and len({j.seed for j in closed}) == 2
    one = LoadJob(spec, ("http://127.0.0.1:1",), mode="count", concurrency=1, total=7).split(2)
    assert [(j.concurrency, j.total) for j in one] == [(1, 7)]
    few = LoadJob(spec, ("http://127.0.0.1:1",), mode="count", concurrency=8, total=3).split(4)
    assert [(j.concurrency, j.total) for j in few] == [(3, 1), (3, 1), (2, 1)]
    opened = LoadJob(spec, ("http://127.0.0.1:1",), mode="open", rate=100.0).split(4)
    assert sum(j.rate for j in opened) == 100.0


def test_cpu_is_read_from_proc_and_merged() -> None:
    before = cpu_ticks(os.getpid())
    deadline = cpu_ticks("self") + 3  # burn a few ticks of CPU
    while cpu_ticks("self") < deadline:
        pass
    assert cpu_ticks(os.getpid()) >= before + 3
    a = CpuWindow(10.0, 12.0, {"n1": (90, 10), "n2": (50, 0)}, {"n1": (160, 20), "n2": (80, 10)}, 30)
    b = CpuWindow(10.1, 12.5, {"n1": (91, 10), "n2": (51, 0)}, {"n1": (170, 30), "n2": (90, 10)}, 20)
    m = merge_windows([a, b])
    assert m is not None and (m.t0, m.t1, m.start, m.end, m.client_ticks) == (
        10.0, 12.5, a.start, b.end, 50)
    assert merge_windows([a, None]) is None
    s = cpu_summary(m, 100)
    assert s is not None
    assert s["server_cpu_s"] == pytest.approx(150 / CLK_TCK)
    assert s["ms_per_op"] == pytest.approx(1500 / CLK_TCK)
    assert s["process_cores"]["n1"] == pytest.approx(100 / CLK_TCK / 2.5)
    assert s["server_system_share"] == pytest.approx(30 / 150)


def test_echo_cpu_per_request_is_measured(tmp_path: Path) -> None:
    """A real server's CPU over a load job's window, per acknowledged request."""
    with running(echo_server(tmp_path)) as srv:
        r = run_job(LoadJob(WorkloadSpec("echo"), (srv.url,), mode="count", total=600, concurrency=16,
                            cpu_pids=(("echo", srv.pid),)))
    assert r.cpu is not None and set(r.cpu.start) == {"echo"}
    s = cpu_summary(r.cpu, r.samples["op"].ok)
    assert s is not None and s["ops"] == 600
    # 600 parsed-and-answered JSON requests cost the server measurable CPU,
    # and far less than the whole window on every core.
    assert 0 < s["server_cpu_s"] <= s["window_s"] * (os.cpu_count() or 1)
    assert s["ms_per_op"] is not None and s["ms_per_op"] > 0


def test_hotpath_shares_each_threads_cpu_by_its_samples() -> None:
    from bench.hotpath import categorize, category_costs, cluster_costs, format_anatomy

    loop = "<module> (ai-memory:1);run (uvloop/__init__.py:38);Runner.run (asyncio/runners.py:86)"
    handler = f"{loop};RequestHandler._handle_request (aiohttp/web_protocol.py:567);notify (daemon/api/notify.py:27)"
    respond = f"{loop};StreamWriter._writelines (aiohttp/http_writer.py:106)"
    peer = f"{loop};PeerLink._deliver (daemon/node.py:135);PeerClient.call (daemon/peer/client.py:44)"
    writer = "Thread._bootstrap (threading.py:988);Writer._transaction (store/writer.py:219)"
    text = f"{handler} 30\n{respond} 50\n{peer} 20\n{writer} 5\n"
    assert categorize(handler.split(";")).startswith("public API handlers")
    assert categorize(respond.split(";")).startswith("aiohttp server machinery")
    assert categorize(peer.split(";")).startswith("peer client")
    assert categorize(writer.split(";")).startswith("store threads")
    # node1: 0.2 s on the main thread, 0.1 s on the others, over 100 ops
    cats = category_costs({"node1": text}, {"node1": (0.2, 0.1)}, 100)
    assert cats["public API handlers (daemon/api: middlewares, validation, core)"] == pytest.approx(0.6)
    assert cats["aiohttp server machinery (parse, route, write responses to sockets)"] == pytest.approx(1.0)
    assert cats["store threads (SQLite writer, aiosqlite readers, executor)"] == pytest.approx(1.0)
    assert sum(cats.values()) == pytest.approx(3.0)  # = (0.2 + 0.1) s * 1000 / 100 ops
    inc, own = cluster_costs({"node1": text, "node2": text}, {"node1": (0.2, 0.1), "node2": (0.2, 0.1)}, 100)
    assert inc["notify (daemon/api/notify.py:27)"] == pytest.approx(1.2)
    assert sum(own.values()) == pytest.approx(6.0)
    before = {"n1": Counter({"HTTP POST /api/v1/notify": 10.0, "peer_batches_total": 2.0,
                             "seconds HTTP POST /api/v1/notify": 1.0})}
    after = {"n1": Counter({"HTTP POST /api/v1/notify": 110.0, "peer_batches_total": 42.0,
                            "HTTP GET /api/v1/metrics": 5.0, "seconds HTTP POST /api/v1/notify": 3.0})}
    text = format_anatomy(before, after, 100)
    assert "1.000  HTTP POST /api/v1/notify" in text and "0.400  peer_batches_total" in text
    assert "20.00  HTTP POST /api/v1/notify" in text  # 2 s inside the node over 100 requests
    assert "GET /api/v1/metrics" not in text  # the scrapes themselves are not work of the workload


def test_machine_probe_measures_wakeups_and_cold_work() -> None:
    from bench import machine

    m = machine.measure(rounds=8)
    assert m["cpus"] >= 1 and 0 < m["syscall_cpu_us"] < 1000
    for key in ("ping_pong_any_cpu", "ping_pong_one_cpu"):
        assert m[key]["round_trip_us"] > 0 and m[key]["cpu_us"] >= 0
    assert m["chunk_back_to_back_us"] > 0
    assert set(m["chunk_after_gap_ratio"]) == {"sleep", "spin"}
    for ratios in m["chunk_after_gap_ratio"].values():
        assert list(ratios) == ["0.5", "2", "5", "20"] and all(r > 0 for r in ratios.values())
    text = machine.render(m)
    assert "ping-pong, one CPU" in text and "after a gap (spin)" in text


def _paired(ratios: list[tuple[float, float, float]]) -> dict[str, Any]:
    """Paired rounds whose (echo, 1 node, 3 nodes) rps and CPU are given."""
    rounds = []
    for i, (echo_rps, one_rps, three_rps) in enumerate(ratios):
        m = {"echo server": _point(echo_rps, 2.0, cpu_ms=0.1),
             "1 node": _point(one_rps, 5.0, cpu_ms=0.3),
             "3 nodes W=2": _point(three_rps, 9.0, cpu_ms=0.1 * (5 + i))}
        order = list(m) if i % 2 == 0 else list(m)[::-1]
        rounds.append({"order": order, "max": m})
    return {"workload": "notify", "rounds": rounds}


def test_notify_ratio_targets_take_the_median_over_pairs_of_rounds(tmp_path: Path) -> None:
    results = _results()
    # The phases alone: 3 nodes at 75 % of 1 node (PASS), 1 node at 80 % of
    # echo (PASS), CPU x5 (MISS). Four rounds, two pairs, say otherwise.
    results["paired"] = _paired([(1000, 500, 300), (1000, 700, 490),
                                 (1000, 550, 400), (1000, 450, 330)])
    by_name = {t.name: t for t in evaluate(results)}
    one = by_name["notify throughput, 1 node vs echo"]
    assert one.value == pytest.approx(0.55) and one.verdict == "MISS"  # pairs: 600 / 500 of 1000
    assert "median of 2 pairs of paired rounds (60%, 50%)" in one.measured
    assert "the phases, minutes apart: 800/s = 80% of echo" in one.measured
    three = by_name["notify throughput, 3 nodes W=2 vs 1 node"]
    # Pair means 395 / 600 and 365 / 500, not the mean of the rounds' ratios.
    assert three.value == pytest.approx((395 / 600 + 365 / 500) / 2) and three.verdict == "MISS"
    cpu = by_name["cluster CPU per notify vs echo CPU per request, 3 nodes W=2"]
    assert cpu.value == pytest.approx(6.5, rel=0.05) and cpu.verdict == "MISS"  # x5.5, x7.5
    # A round without CPU readings: that target falls back to the phases, and says why.
    results["paired"]["rounds"][1]["max"]["echo server"]["cpu"] = None
    cpu = next(t for t in evaluate(results) if t.name == cpu.name)
    assert cpu.value == pytest.approx(5.0)
    assert "(paired rounds unusable: 'CPU per operation" in cpu.measured
    # A pair where a system answered nothing at all: unusable, not a crash.
    results["paired"] = _paired([(0, 500, 300), (0, 700, 490)])
    one = next(t for t in evaluate(results) if t.name == one.name)
    assert one.verdict == "PASS" and "(paired rounds unusable: ZeroDivisionError)" in one.measured

    results["paired"] = _paired([(1000, 500, 300), (0, 700, 490)])
    md = report.write_run(tmp_path / "r", results, evaluate(results))
    assert "**Paired rounds**" in md
    assert "| 1 | echo server → 1 node → 3 nodes W=2 | 1,000 · 0.100 | 500 · 0.300 | 300 · 0.500 | 50% | 60% | x5.0 |" in md
    # Echo answered nothing in round 2: no CPU per request and no ratio to it.
    row = next(line for line in md.splitlines() if line.startswith("| 2 |"))
    assert row.startswith("| 2 | 3 nodes W=2 → 1 node → echo server | 0 · - | 700 · 0.300 | 490 · ")
    assert row.endswith(" | - | 70% | - |")


@pytest.mark.slow  # real servers in processes of their own
def test_the_paired_phase_runs_real_servers_under_the_targets_labels(tmp_path: Path) -> None:
    from dataclasses import replace as dc_replace

    from bench.profiles import QUICK
    from bench.runner import Run

    profile = dc_replace(QUICK, paired_rounds=2, max_duration_s=0.4, warmup_s=0.0, concurrency=8)
    results, targets, md = Run(profile, tmp_path / "out", progress=False, only=("paired",)).execute()
    assert results["errors"] == []
    assert [r["order"] for r in results["paired"]["rounds"]] == [
        ["echo server", "1 node", "3 nodes W=2"], ["3 nodes W=2", "1 node", "echo server"]]
    for r in results["paired"]["rounds"]:
        for m in r["max"].values():
            assert m["rps"] > 0 and m["cpu"]["ms_per_op"] > 0
    by_name = {t.name: t for t in targets}
    for name in ("notify throughput, 1 node vs echo", "notify throughput, 3 nodes W=2 vs 1 node",
                 "cluster CPU per notify vs echo CPU per request, 3 nodes W=2"):
        assert by_name[name].verdict in ("PASS", "MISS"), by_name[name]
        assert "median of 1 pairs of paired rounds" in by_name[name].measured
    assert "**Paired rounds**" in md


@pytest.mark.slow  # real servers in processes of their own
def test_paired_rounds_alternate_their_order_against_real_servers(tmp_path: Path) -> None:
    from dataclasses import replace as dc_replace

    from bench import phases
    from bench.profiles import QUICK

    class InProcess:  # the pool seam: run each job here, as the smoke tests do
        def run(self, job: LoadJob, update: Any = None) -> Any:
            return run_job(job)

    profile = dc_replace(QUICK, paired_rounds=3, max_duration_s=0.3, warmup_s=0.0, concurrency=4)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running(echo_server(tmp_path / "a")) as a, running(echo_server(tmp_path / "b")) as b:
        got = phases.paired_rounds(InProcess(), Progress(0, enabled=False), profile, [  # type: ignore[arg-type]
            ("echo server", (a.url,), (("a", a.pid),), WorkloadSpec("echo")),
            ("1 node", (b.url,), (("b", b.pid),), WorkloadSpec("echo")),
        ])
    assert [r["order"] for r in got["rounds"]] == [
        ["echo server", "1 node"], ["1 node", "echo server"], ["echo server", "1 node"]]
    for r in got["rounds"]:
        for m in r["max"].values():
            assert m["rps"] > 0 and m["cpu"]["ms_per_op"] > 0 and "kinds" not in m


def test_the_lean_client_drives_the_load_generator_too(tmp_path: Path) -> None:
    with running(echo_server(tmp_path)) as srv:
        closed = run_job(LoadJob(WorkloadSpec("echo"), (srv.url,), mode="count", total=300, concurrency=16,
                                 client="raw", cpu_pids=(("echo", srv.pid),)))
        opened = run_job(LoadJob(WorkloadSpec("echo"), (srv.url,), mode="open", rate=400.0, duration_s=0.5,
                                 connections=8, client="raw"))
    op = summarize(closed.samples["op"], closed.elapsed_s)
    assert (op.requests, op.ok, op.errors) == (300, 300, 0)
    assert closed.samples["echo"].statuses == {201: 300}
    assert closed.cpu is not None
    o = summarize(opened.samples["op"], opened.elapsed_s, offered_rps=400.0)
    assert o.ok == 200 and o.dropped == 0
    with pytest.raises(ValueError, match="client"):
        LoadJob(WorkloadSpec("echo"), (srv.url,), client="curl")
