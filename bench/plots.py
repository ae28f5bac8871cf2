"""The two pictures of a run, drawn with matplotlib's Agg backend.

``latency_vs_throughput.png``: one panel per workload; for every cluster
(and the echo ceiling on the notify panel) the open-loop sweep as p50 and
p99 latency against the throughput actually achieved, so the knee where
latency climbs is visible. ``inbox_latency_vs_size.png``: inbox read
p50/p99 of one sequential client against the number of messages in the
inbox (log x).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _curve(points: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    pts = sorted((p for p in points if p.get(key) is not None), key=lambda p: p["rps"])
    return [p["rps"] for p in pts], [p[key] for p in pts]


def latency_vs_throughput(results: dict[str, Any], path: Path) -> Path | None:
    workloads = [w for w in results.get("workloads", []) if w.get("sweep")]
    names = sorted({w["workload"] for w in workloads}, key=["notify", "sendpop", "mix"].index)
    if not names:
        return None
    fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names), 4.2), squeeze=False)
    echo = results.get("echo") or {}
    for ax, name in zip(axes[0], names, strict=True):
        series = [w for w in workloads if w["workload"] == name]
        if name == "notify" and echo.get("sweep"):
            series = [{"cluster": "echo ceiling", "sweep": echo["sweep"]}, *series]
        for i, w in enumerate(series):
            color = f"C{i}"
            x, y = _curve(w["sweep"], "p99_ms")
            ax.plot(x, y, "o-", color=color, label=f"{w['cluster']} p99")
            x, y = _curve(w["sweep"], "p50_ms")
            ax.plot(x, y, "s--", color=color, alpha=0.6, label=f"{w['cluster']} p50")
        unit = "claims/s" if name == "sendpop" else "ops/s"
        ax.set_title(f"{name}: latency vs throughput")
        ax.set_xlabel(f"achieved {unit} (ok)")
        ax.set_ylabel("latency ms")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def inbox_latency_vs_size(results: dict[str, Any], path: Path) -> Path | None:
    rows = [r for r in (results.get("scenario") or {}).get("inbox", []) if r.get("sequential")]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, consistency in enumerate(sorted({r["consistency"] for r in rows})):
        pts = sorted((r for r in rows if r["consistency"] == consistency), key=lambda r: r["size"])
        sizes = [r["size"] for r in pts]
        ax.plot(sizes, [r["sequential"]["p99_ms"] for r in pts], "o-", color=f"C{i}", label=f"{consistency} p99")
        ax.plot(sizes, [r["sequential"]["p50_ms"] for r in pts], "s--", color=f"C{i}", alpha=0.6,
                label=f"{consistency} p50")
    ax.axhline(10.0, color="grey", linestyle=":", label="target p99 10 ms")
    ax.set_xscale("log")
    ax.set_xlabel("messages in the inbox")
    ax.set_ylabel("read latency ms (limit 50, one client)")
    ax.set_title("inbox read latency vs inbox size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_all(results: dict[str, Any], run_dir: Path) -> list[Path]:
    made = [
        latency_vs_throughput(results, run_dir / "latency_vs_throughput.png"),
        inbox_latency_vs_size(results, run_dir / "inbox_latency_vs_size.png"),
    ]
    return [p for p in made if p is not None]
