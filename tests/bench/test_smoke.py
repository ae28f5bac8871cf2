"""Smoke test of the benchmark harness: stats, targets, report, plots, and
a few hundred requests against the echo ceiling through the real load
generator (in-process, so the test stays fast)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench import plots, report
from bench.loadgen import LoadJob, run_job
from bench.procs import echo_server, running
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


def _point(rps: float, p99: float, fraction: float | None = None, ops: float | None = None) -> dict[str, Any]:
    s = Sample()
    for _ in range(10):
        s.record(201, p99)
    d = summarize(s, 1.0).to_dict()
    d.update(rps=rps, p50_ms=p99 / 2, p99_ms=p99, ops_per_s=ops, offered_rps=rps, fraction=fraction, kinds={})
    return d


def _results() -> dict[str, Any]:
    three = "3 nodes W=2"
    sweep = [_point(100.0 * f, 4.0 + 30 * f, f) for f in (0.1, 0.5, 1.0)]
    inbox = [
        {"size": 1000, "consistency": "default", "max": _point(900, 3.0), "sequential": _point(300, 3.0)},
        {"size": 20000, "consistency": "default", "max": _point(800, 8.0), "sequential": _point(120, 8.0)},
    ]
    return {
        "meta": {"run_id": "t", "profile": "quick", "commit": "abc", "daemon_version": "0", "cores": 2,
                 "profile_settings": {"concurrency": 64, "loadgen_procs": 1, "inbox_sizes": [1000, 20000]}},
        "echo": {"cluster": "echo server", "workload": "notify body", "max": _point(1000.0, 5.0), "sweep": sweep},
        "workloads": [
            {"cluster": three, "workload": "notify", "max": _point(600.0, 30.0), "sweep": sweep},
            {"cluster": three, "workload": "sendpop", "max": _point(700.0, 40.0, ops=700.0), "sweep": sweep},
        ],
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
        "notify throughput, 3 nodes W=2": "PASS",  # 600 of 1000 echo
        "notify p99 at half of max, 3 nodes": "PASS",  # 4 + 30 * 0.5 = 19 ms
        "send+pop claims, 3 nodes": "MISS",  # 700 claims/s
        "inbox read p99, largest inbox (limit 50)": "MISS",  # 8 ms, but over 2x the 3 ms of 1k
        "catch-up of missed ops": "PASS",
        "RSS per node": "MISS",  # node2 160 MB
    }
    del results["echo"]
    assert {t.name: t.verdict for t in evaluate(results)}["notify throughput, 3 nodes W=2"] == "SKIP"
    results = _results()

    run_dir = tmp_path / "results" / "t"
    md = report.write_run(run_dir, results, evaluate(results))
    assert "| 3 nodes W=2 | notify | 600 ops/s | 60% |" in md
    assert "**MISS**" in md and "**PASS**" in md
    assert (tmp_path / "results" / "latest.md").read_text().strip() == md.strip()
    assert json.loads((run_dir / "results.json").read_text())["targets"][0]["verdict"] == "PASS"

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
