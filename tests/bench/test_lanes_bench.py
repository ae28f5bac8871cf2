"""The benchmark's lanes: nodes of ``serve --lanes 2`` measured over all their
processes, the lane-aware client, and the lanes targets (bench/lanes.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from bench import lanes, report
from bench.loadgen import LoadJob, run_job
from bench.phases import result_dict
from bench.procs import Cluster, running
from bench.targets import evaluate, two_core_bound
from bench.workloads import WorkloadSpec

PLAIN = "lanes: notify throughput, 1 node with 2 lanes vs 1 lane"
DIRECT = "lanes: notify throughput, 2 lanes with a lane-aware client vs 1 lane"


def test_a_two_lane_node_is_measured_over_every_process(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "n", size=1, write_quorum=1, lanes=2)
    with running(cluster):
        pids = dict(cluster.pids())
        assert set(pids) == {"node1", "node1.lane0", "node1.lane1"}
        assert len(set(pids.values())) == 3
        spec = WorkloadSpec("notify")
        counts = {}
        for name, s in (("plain", spec), ("direct", dataclasses.replace(spec, direct_lanes=2))):
            before = lanes.handoffs(cluster.lane_urls())
            r = run_job(LoadJob(s, cluster.urls, mode="count", total=120, concurrency=8,
                                cpu_pids=cluster.pids(), client="raw"))
            counts[name] = lanes.handoffs(cluster.lane_urls()) - before
            res = result_dict(r)
            assert res["ok"] == 120
            assert set(res["cpu"]["process_ms_per_op"]) == set(pids)
        # memories (bench.lanes_memory): a store is made on its namespace's
        # lane, a listing asks every lane
        for name, s in (("memory", WorkloadSpec("memory")),
                        ("memory direct", WorkloadSpec("memory", direct_lanes=2)),
                        ("memlist", WorkloadSpec("memlist"))):
            before = lanes.handoffs(cluster.lane_urls())
            r = run_job(LoadJob(s, cluster.urls, mode="count", total=120, concurrency=8,
                                cpu_pids=cluster.pids(), client="raw"))
            counts[name] = lanes.handoffs(cluster.lane_urls()) - before
            assert result_dict(r)["ok"] == 120, name
    # through the node's port about half go to the other lane; never on the owning lane's port
    assert 20 <= counts["plain"] <= 100
    assert counts["direct"] == 0
    assert 20 <= counts["memory"] <= 100 and counts["memory direct"] == 0
    assert counts["memlist"] == 0  # served where it arrives, each lane asked for its share


def _burst(rps: float, cpu: float, share: float) -> dict[str, Any]:
    return {"rps": rps, "cpu": {"ms_per_op": cpu, "process_ms_per_op": {"node1": cpu},
                                "process_cores": {"node1": 0.5}}, "handoff_share": share}


def _section() -> dict[str, Any]:
    rounds = []
    for i, (one, two, direct) in enumerate([(1000, 1400, 1600), (1200, 1500, 1900),
                                            (1000, 1600, 1500), (1000, 1500, 1500)]):
        m = {lanes.ONE_LANE: _burst(one, 0.2, 0.0), lanes.TWO_LANES: _burst(two, 0.3, 0.5),
             lanes.TWO_LANES_DIRECT: _burst(direct, 0.25, 0.0)}
        order = list(m) if i % 2 == 0 else list(m)[::-1]
        rounds.append({"order": order, "max": m})
    section: dict[str, Any] = {"workload": "notify", "client": "raw", "lanes": 2, "concurrency": 64,
                               "rounds": rounds}
    section["summary"] = lanes.summary(section)
    return section


def test_the_lanes_targets_are_medians_of_pairs_of_rounds(tmp_path: Path) -> None:
    results: dict[str, Any] = {"meta": {"run_id": "t", "profile": "quick", "profile_settings": {
        "concurrency": 64, "loadgen_procs": 1}, "lanes": 0}, "workloads": [], "errors": [],
        "lanes": _section()}
    targets = {t.name: t for t in evaluate(results)}
    # pairs: (1400+1500)/(1000+1200) = 1.318, (1600+1500)/2000 = 1.55 -> median 1.434
    assert targets[PLAIN].value == pytest.approx((2900 / 2200 + 3100 / 2000) / 2)
    assert targets[PLAIN].verdict == "MISS"
    assert targets[DIRECT].value == pytest.approx((3500 / 2200 + 3000 / 2000) / 2)
    assert targets[DIRECT].verdict == "PASS"
    assert "50% of notifies handed" in targets[PLAIN].measured
    sm = results["lanes"]["summary"]
    assert sm["cpu_ms_per_handed_notify_median"] == pytest.approx((0.3 - 0.25) / 0.5)
    md = report.markdown(results, list(targets.values()))
    assert "**Lanes rounds**" in md and "CPU per handed notify" in md
    del results["lanes"]
    assert {t.name: t.verdict for t in evaluate(results)}[PLAIN] == "SKIP"


def test_on_two_cores_the_report_names_the_cpu_bound_of_the_goal() -> None:
    section = _section()
    for r in section["rounds"]:  # one lane: 1 busy core, 0.2 ms per notify; client 0.05 ms
        r["max"][lanes.ONE_LANE]["cpu"].update(server_cores=1.0, client_ms_per_op=0.05)
    results: dict[str, Any] = {"meta": {"cores_usable": 2}, "lanes": section}
    # 1.5x of 5,000/s = 7,500/s on 2 cores: 2 lanes at k x 0.2 ms plus the client's 0.05 ms
    # fit 2 cores only for k <= 4/3 - 0.25
    assert two_core_bound(results) == pytest.approx(4 / 3 - 0.05 / 0.2)
    assert "at most x1.08 of one lane's CPU per notify" in \
        {t.name: t for t in evaluate({**results, "workloads": [], "errors": []})}[PLAIN].measured
    assert two_core_bound({**results, "meta": {"cores_usable": 16}}) is None
    del section["rounds"][0]["max"][lanes.ONE_LANE]["cpu"]["client_ms_per_op"]
    assert two_core_bound(results) is None
