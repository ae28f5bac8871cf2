"""Free ports per test process: each pytest-xdist worker picks from its own slice."""

from __future__ import annotations

import pytest

from bench.procs import free_lane_ports, port_window
from tests.cluster import harness


def test_outside_xdist_the_whole_range_below_the_ephemeral_ports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert port_window(32768) == (20768, 32768)
    assert port_window(5000) == (1024, 5000)  # never a privileged port


def test_workers_get_disjoint_slices_that_cover_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    slices = []
    for k in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{k}")
        slices.append(port_window(32768))
    assert slices == [(20768, 24768), (24768, 28768), (28768, 32768)]


def test_a_node_and_its_lane_ports_stay_in_the_workers_slice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    start, end = port_window(harness._ephemeral_range()[0])
    for _ in range(20):
        port = harness.free_port((-1, 0, 100, 200))
        assert start <= port - 1 and port + 200 < end, (port, start, end)
        for base in free_lane_ports(3, 2):
            assert start <= base and base + 200 < end, (base, start, end)
