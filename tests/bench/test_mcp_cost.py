"""`python -m bench --mcp` end to end, tiny: one real node, two sessions of the official
MCP client in each era and two HTTP workers, one round, a few pairs each."""

from __future__ import annotations

import pytest

from bench.__main__ import main

pytestmark = [pytest.mark.slow]


def test_bench_mcp_runs_and_prints_every_transport_beside_http(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mcp", "--mcp-rounds", "1", "--mcp-pairs", "8", "--mcp-sessions", "2",
                 "--mcp-rate", "100"]) == 0
    out = capsys.readouterr().out
    assert "paced at 100 calls/s" in out and "closed loop" in out
    for pair in ("notify+inbox", "send+pop"):
        for transport in ("HTTP", "MCP 2026-07-28", "MCP legacy handshake"):
            assert f"| {pair} | {transport} |" in out, (pair, transport)
