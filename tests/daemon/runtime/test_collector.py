"""The garbage collector's setup (daemon/runtime/collector.py): thresholds, the
startup freeze, pauses in the metrics, and all of it in a real process."""

from __future__ import annotations

import gc
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import limits
from daemon.runtime import collector
from daemon.runtime.metrics import Metrics
from tests.daemon.procdaemon import daemon_process


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    callbacks = list(gc.callbacks)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks[:] = callbacks
        gc.unfreeze()


def test_tune_sets_the_thresholds_from_limits(restored_gc: None) -> None:
    collector.tune()
    assert gc.get_threshold() == (limits.gc_young_objects_max, limits.gc_older_every,
                                  limits.gc_older_every)
    assert limits.gc_young_objects_max > 700  # the point of it: above CPython's default


def test_freeze_keeps_what_is_alive_out_of_later_collections(restored_gc: None) -> None:
    kept = [[i] for i in range(1000)]
    collector.freeze_startup()
    assert gc.get_freeze_count() >= len(kept)
    assert gc.get_count()[0] < 100  # collected just before the freeze


def test_each_collection_is_observed_by_generation_until_stopped(restored_gc: None) -> None:
    metrics = Metrics()
    ticks = iter(range(100))
    stop = collector.watch(metrics, clock=lambda: float(next(ticks)))
    gc.collect(0)
    gc.collect(2)
    row0 = metrics.hists["gc_pause_seconds"][(("generation", "0"),)]
    row2 = metrics.hists["gc_pause_seconds"][(("generation", "2"),)]
    assert sum(row0[:-1]) >= 1 and sum(row2[:-1]) >= 1
    assert row0[-1] >= 1.0  # one tick of the fake clock per pause
    stop()
    before = {k: list(v) for k, v in metrics.hists["gc_pause_seconds"].items()}
    gc.collect()
    assert {k: list(v) for k, v in metrics.hists["gc_pause_seconds"].items()} == before
    assert "ai_memory_gc_frozen_objects" in metrics.render()


@pytest.mark.slow  # a real daemon process
def test_a_serving_process_froze_its_startup_objects(tmp_path: Path) -> None:
    with daemon_process(tmp_path / "d") as proc:
        for i in range(50):
            body = json.dumps({"target_agent_id": f"a{i}", "title": "t", "payload": "p"}).encode()
            req = urllib.request.Request(proc.url + "/api/v1/notify", data=body, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "X-Agent-Id": "sender"})
            with urllib.request.urlopen(req, timeout=5) as r:
                assert r.status == 201
        with urllib.request.urlopen(proc.url + "/api/v1/metrics", timeout=5) as r:
            text = r.read().decode()
    gauges = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith("ai_memory_gc_")}
    assert gauges["ai_memory_gc_frozen_objects"] > 10_000  # modules, schemas, the app
    assert gauges["ai_memory_gc_young_objects_max"] == limits.gc_young_objects_max  # tune() ran
