"""Writing a run down: results.json, the markdown tables, the docs copy.

``results.json`` keeps everything measured (every summary, every sweep
point, per request kind). The markdown is the human view of the same
document: it is written to ``<run>/results.md`` and to
``bench/results/latest.md``, and with ``--update-docs`` it replaces the
block between the two marker comments in ``docs/performance.md``, so the
committed page carries the tables of the run it names.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.machine import describe
from bench.targets import ECHO, MACHINE_DEPENDENCE, NOMINAL, ONE, THREE, Target

DOCS_BEGIN = "<!-- bench:results:begin -->"
DOCS_END = "<!-- bench:results:end -->"


def _ms(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def _n(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 10 or v == 0 else f"{v:.2g}"


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v / 2**20:.0f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows), ""]


def _cpu(d: dict[str, Any] | None) -> float | None:
    cpu = (d or {}).get("cpu") or {}
    v = cpu.get("ms_per_op")
    return None if v is None else float(v)


def _ms3(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _cpu_rows(results: dict[str, Any]) -> list[list[str]]:
    """One row per measured maximum: the servers' CPU per acknowledged op."""
    echo = results.get("echo")
    echo_ms = _cpu(echo["max"]) if echo else None
    entries: list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]] = []
    if echo:
        entries.append(("echo server", "per request", echo["max"], _half(echo)))
    for w in results.get("workloads", []):
        if w.get("max"):
            unit = "per claim" if w["workload"] == "sendpop" else "per ok op"
            entries.append((w["cluster"], f"{w['workload']} ({unit})", w["max"], _half(w)))
    nats = results.get("nats") or {}
    if nats.get("max"):
        entries.append(("NATS JetStream R3", "send+pop (per claim)", nats["max"], None))
    rows = []
    for system, what, m, half in entries:
        cpu = (m or {}).get("cpu")
        if not cpu:
            rows.append([system, what, "not measured", "", "", "", "", "", "", ""])
            continue
        ms = cpu.get("ms_per_op")
        ratio = f"x{ms / echo_ms:.1f}" if ms is not None and echo_ms else "-"
        procs = ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu["process_cores"].items()))
        share = cpu.get("server_system_share")
        client = cpu.get("client_ms_per_op")
        cores = (results.get("meta") or {}).get("cores")
        ceiling = (f"{_n(cores * 1000.0 / (ms + client))}/s" if cores and ms is not None and client is not None
                   and ms + client > 0 else "-")
        rows.append([system, what, _ms3(ms), ratio, _ms3(_cpu(half)), "-" if share is None else f"{share:.0%}",
                     f"{cpu['server_cores']:.2f}", procs, _ms3(client), ceiling])
    return rows


def _half(w: dict[str, Any]) -> dict[str, Any] | None:
    pts = [p for p in w.get("sweep", []) if p.get("fraction") is not None]
    return min(pts, key=lambda p: abs(p["fraction"] - 0.5)) if pts else None


def _errors(d: dict[str, Any]) -> str:
    return f"{d['http_errors'] + d['transport_errors']:,} / {d['unavailable']:,}"


def size_note(results: dict[str, Any]) -> str | None:
    """Which sizes this run measured where the goals are stated for 100k, or None."""
    meta = results["meta"]
    sc = results.get("scenario") or {}
    sizes = [r.get("stored", r["size"]) for r in sc.get("inbox") or []]
    big = max(sizes) if sizes else None
    missed = (sc.get("catchup") or {}).get("missed_ops")
    stored = sc.get("messages_stored")
    if (big is None or big >= NOMINAL) and (missed is None or missed >= NOMINAL):
        return None
    parts = []
    if big is not None and big < NOMINAL:
        parts.append(f"the largest inbox holds {big:,} messages")
    if missed is not None and missed < NOMINAL:
        parts.append(f"the restarted node missed {missed:,} ops")
    if stored is not None and stored < NOMINAL:
        parts.append(f"the nodes held {stored:,} messages when their memory was read")
    return (f"Profile {meta['profile']}: {', '.join(parts)}, where the goals are stated for 100k; "
            "those goals are restated for the sizes measured (catch-up time pro rata), and "
            "`--profile full` measures 100k.")


def _header(results: dict[str, Any]) -> list[str]:
    """Which run, on what, and how far to trust its figures."""
    meta = results["meta"]
    lines = [
        f"Run `{meta['run_id']}` · profile **{meta['profile']}** · commit `{meta.get('commit') or '?'}` · "
        f"daemon {meta.get('daemon_version') or '?'} · "
        f"{meta['profile_settings']['concurrency']} keep-alive connections from "
        f"{meta['profile_settings']['loadgen_procs']} load-generator process(es), "
        f"{meta['profile_settings'].get('client', 'aiohttp')} HTTP client"
        + (f"; every node of the other phases runs `serve --lanes {meta['lanes']}`" if meta.get("lanes") else "")
        + ".",
        "",
        f"Machine: {describe(meta)}.",
        "",
    ]
    lines += [
        "All processes (nodes, echo server, NATS, load generator) share this machine's cores, so "
        "throughput and latency figures are noisy (roughly ±15 % between identical runs, more when "
        "other work is running); the ratios between phases of this one run and the CPU per operation "
        "are the steadier figures.",
        "",
    ]
    note = size_note(results)
    if note:
        lines += [note, ""]
    return lines


def _max_section(results: dict[str, Any]) -> list[str]:
    """Closed-loop maximum of the echo server and of every workload."""
    echo = (results.get("echo") or {}).get("max")
    echo_rps = echo["rps"] if echo else None
    lines = ["**Maximum throughput** (closed loop). Errors are non-503 failures / 503s.", ""]
    rows = []
    if echo:
        rows.append(["echo server", "notify body", f"{_n(echo['rps'])} req/s", "100%", _ms(echo["p50_ms"]),
                     _ms(echo["p95_ms"]), _ms(echo["p99_ms"]), _ms(echo["max_ms"]), _errors(echo)])
    for w in results.get("workloads", []):
        m = w.get("max")
        if not m:
            rows.append([w["cluster"], w["workload"], f"failed: {w.get('error', '?')}", "", "", "", "", "", ""])
            continue
        unit = "claims/s" if w["workload"] == "sendpop" else "ops/s"
        tp = m["ops_per_s"] if m.get("ops_per_s") is not None else m["rps"]
        ratio = f"{m['rps'] / echo_rps:.0%}" if echo_rps else "-"
        rows.append([w["cluster"], w["workload"], f"{_n(tp)} {unit}", ratio, _ms(m["p50_ms"]), _ms(m["p95_ms"]),
                     _ms(m["p99_ms"]), _ms(m["max_ms"]), _errors(m)])
    return lines + _table(["cluster", "workload", "throughput", "vs echo", "p50 ms", "p95 ms", "p99 ms", "max ms",
                           "errors / 503"], rows)


def _cpu_section(results: dict[str, Any]) -> list[str]:
    """The servers' CPU per acknowledged operation, with how it was read."""
    cpu_rows = _cpu_rows(results)
    if not cpu_rows:
        return []
    lines = ["**CPU per acknowledged operation**: user + system CPU of every server process (all nodes; "
             "the three `nats-server`s for NATS) over the measured window, read from `/proc/<pid>/stat`, "
             "divided by the successful operations (claims for send+pop) of that window. Cores busy is "
             "that CPU over the window's wall time; kernel share is the part spent in system time (syscalls, "
             "loopback TCP, fsync). Every process here shares the machine's cores with "
             "the load generator (and with whatever else runs), which makes throughput noisy; CPU per "
             "operation moves much less with contention, so compare these figures across runs. The "
             "CPU-bound ceiling is the rate at which servers and load generator together would use "
             "every core of this machine at these costs (cores / (server + load generator CPU per op)): "
             "where the measured maximum is far below it, something other than CPU (other work on the "
             "machine, waiting) held the run back.", ""]
    return lines + _table(["system", "workload", "CPU ms/op at max", "vs echo CPU/request", "CPU ms/op at 50% load",
                           "kernel share", "server cores busy", "cores per process", "load generator CPU ms/op",
                           "CPU-bound ceiling"], cpu_rows)


def _sweep_section(results: dict[str, Any]) -> list[str]:
    """Open-loop latency at each offered fraction of the maximum, one row per sweep."""
    sweeps = [w for w in ([results.get("echo")] if results.get("echo") else []) + results.get("workloads", [])
              if w and w.get("sweep")]
    if not sweeps:
        return []
    fracs = sorted({p["fraction"] for w in sweeps for p in w["sweep"]})
    lines = ["**Latency under offered load** (open loop at fractions of the maximum): "
             "p50 / p99 ms, achieved ops/s.", ""]
    rows = []
    for w in sweeps:
        by = {p["fraction"]: p for p in w["sweep"]}
        cells = [w.get("cluster", "echo server"), w.get("workload", "notify body")]
        for f in fracs:
            p = by.get(f)
            cells.append("-" if p is None else f"{_ms(p['p50_ms'])} / {_ms(p['p99_ms'])} · {_n(p['rps'])}")
        rows.append(cells)
    return lines + _table(["cluster", "workload", *(f"{f:.0%}" for f in fracs)], rows)


def _inbox_section(sc: dict[str, Any], conc: Any) -> list[str]:
    """Inbox reads per inbox size: one sequential client, then ``conc`` clients at the maximum."""
    lines = [f"**Inbox read**, limit 50, {sc['cluster']}: latency of one client reading sequentially, "
             f"and the maximum rate with {conc} clients.", ""]
    rows = []
    for r in sc["inbox"]:
        q, m = r["sequential"], r["max"]
        held = r.get("stored", r["size"])
        label = f"{held:,}" if held == r["size"] else f"{held:,} (of {r['size']:,} sent)"
        rows.append([label, r["consistency"], _n(q["requests"]), _ms(q["p50_ms"]),
                     _ms(q["p95_ms"]), _ms(q["p99_ms"]), _ms(q["max_ms"]), _n(m["rps"]), _ms(m["p99_ms"]),
                     f"{_errors(q)}, {_errors(m)}"])
    return lines + _table(["messages in inbox", "consistency", "reads", "p50 ms", "p95 ms", "p99 ms", "max ms",
                           f"max reads/s ({conc} clients)", "p99 ms at max", "errors / 503"], rows)


def _catchup_section(sc: dict[str, Any]) -> list[str]:
    """How long a restarted node took to become healthy and then to converge."""
    c = sc["catchup"]
    fills = sc.get("fill", [])
    fill_rate = (sum(f["ok"] for f in fills) / sum(f["elapsed_s"] for f in fills)) if fills else None
    lines = ["**Catch-up** of a restarted node (stopped while the others took the inbox fills).", ""]
    return lines + _table(
        ["missed ops", "fill rate with node down", "restart → healthy s", "healthy → same vv s", "total s"],
        [[_n(c["missed_ops"]), f"{_n(fill_rate)} notify/s", _ms(c["restart_to_healthy_s"]),
          _ms(c["healthy_to_converged_s"]) if c["healthy_to_converged_s"] is not None else "timeout",
          _ms(c["restart_to_converged_s"]) if c["restart_to_converged_s"] is not None else "timeout"]],
    )


def _memory_section(sc: dict[str, Any]) -> list[str]:
    """Each node's RSS and SQLite file size with the inboxes stored."""
    lines = [f"**Memory** with {sc['messages_stored']:,} inbox messages stored (plus the workloads' records).", ""]
    return lines + _table(["node", "RSS MB", "SQLite files MB"],
                          [[k, _mb(v), _mb(sc.get("db_bytes", {}).get(k))] for k, v in sorted(sc["rss_bytes"].items())])


def _scenario_sections(results: dict[str, Any]) -> list[str]:
    """The inbox, catch-up and memory tables, each where the scenario measured it."""
    sc = results.get("scenario")
    lines: list[str] = []
    if sc and sc.get("inbox"):
        lines += _inbox_section(sc, results["meta"]["profile_settings"].get("inbox_concurrency", "?"))
    if sc and sc.get("catchup"):
        lines += _catchup_section(sc)
    if sc and sc.get("rss_bytes"):
        lines += _memory_section(sc)
    return lines


def _nats_section(results: dict[str, Any]) -> list[str]:
    """NATS JetStream's send+pop on the same machine, or why it was skipped."""
    nats = results.get("nats")
    if not nats:
        return []
    title = "**NATS JetStream** work-queue stream (R3, 3 servers) send+pop, same machine."
    if nats.get("skipped"):
        return [title, "", f"Skipped: {nats['skipped']}", ""]
    m = nats["max"]
    table = _table(["system", "claims/s", "p50 ms", "p99 ms", "errors", "CPU ms/claim"],
                   [["NATS JetStream R3", _n(m["ops_per_s"]), _ms(m["p50_ms"]), _ms(m["p99_ms"]),
                     _n(m["http_errors"] + m["transport_errors"]), _ms3(_cpu(m))]])
    return [title, "", *table]


def _ratio(num: float, den: float) -> str:
    return f"{num / den:.0%}" if den else "-"


def _paired_section(results: dict[str, Any]) -> list[str]:
    """The paired rounds: each system's notify maximum, seconds apart."""
    paired = results.get("paired")
    if not paired or not paired.get("rounds"):
        return []
    names = (ECHO, ONE, THREE)
    lines = ["**Paired rounds**: the echo server, 1 node and 3 nodes W=2 running side by side, each "
             "driven at its maximum (closed loop) one right after another, the order reversed every "
             "round; each notify ratio target is the median over the pairs of rounds (a round and the "
             "reversed one after it) of the ratio of the pair's mean figures. Throughput ops/s, then "
             "CPU ms per operation.", ""]
    rows = []
    for i, r in enumerate(paired["rounds"], 1):
        m = r["max"]
        cells = [str(i), " → ".join(r["order"])]
        cells += [f"{_n(m[k]['rps'])} · {_ms3(_cpu(m[k]))}" for k in names]
        cpu3, cpue = _cpu(m[THREE]), _cpu(m[ECHO])
        cells += [_ratio(m[ONE]["rps"], m[ECHO]["rps"]), _ratio(m[THREE]["rps"], m[ONE]["rps"]),
                  "-" if not cpu3 or not cpue else f"x{cpu3 / cpue:.1f}"]
        rows.append(cells)
    lines += _table(["round", "order", "echo", "1 node notify", "3 nodes notify", "1 node vs echo",
                     "3 nodes vs 1 node", "CPU per notify vs echo"], rows)
    return lines


def _per_process(d: dict[str, Any]) -> str:
    """Each process's CPU ms per notify and busy cores (supervisor, lanes)."""
    cpu = d.get("cpu") or {}
    per, cores = cpu.get("process_ms_per_op") or {}, cpu.get("process_cores") or {}
    return ", ".join(f"{k} {per[k]:.3f} ({cores.get(k, 0):.2f} cores)" for k in sorted(per)) or "-"


def _lanes_section(results: dict[str, Any]) -> list[str]:
    """The lanes rounds: 1 lane, 2 lanes, 2 lanes with a lane-aware client."""
    from bench import lanes

    section = results.get("lanes")
    if not section or not section.get("rounds"):
        return []
    names = (lanes.ONE_LANE, lanes.TWO_LANES, lanes.TWO_LANES_DIRECT)
    lines = [f"**Lanes rounds**: one node started plain against one with `serve --lanes {section['lanes']}`, "
             f"{section['concurrency']} connections of the lean client, closed loop, the order reversed every "
             "round; the 2-lane node is driven twice, through its one port (the kernel spreads connections "
             "over the lanes, a lane hands a notify whose recipient another lane owns) and by a lane-aware "
             "client (each notify to its owning lane's port). Per system: notifies/s · CPU ms per notify, "
             "all processes of the node · share handed over.", ""]
    rows = []
    for i, r in enumerate(section["rounds"], 1):
        m = r["max"]
        cells = [str(i), " → ".join(r["order"])]
        for k in names:
            share = m[k].get("handoff_share")
            cells.append(f"{_n(m[k]['rps'])} · {_ms3(_cpu(m[k]))} · "
                         + ("-" if share is None else f"{share:.0%}"))
        rows.append(cells)
    lines += _table(["round", "order", *names], rows)
    lines += ["CPU ms per notify of each process (busy cores), last round:", ""]
    last = section["rounds"][-1]["max"]
    lines += [f"- {k}: {_per_process(last[k])}" for k in names]
    lines.append("")
    sm = section.get("summary") or {}
    for key, label in (("plain", lanes.TWO_LANES), ("direct", lanes.TWO_LANES_DIRECT)):
        if key in sm:
            lines.append(f"- {label} vs {lanes.ONE_LANE}: notifies/s x{sm[key]['rate_ratio_median']:.2f}, "
                         f"CPU per notify x{sm[key]['cpu_ratio_median']:.2f} (medians over pairs of rounds)")
    if sm.get("cpu_ms_per_handed_notify_median") is not None:
        lines.append(f"- CPU per handed notify (2 lanes minus lane-aware, over the share handed): "
                     f"{sm['cpu_ms_per_handed_notify_median']:.3f} ms (median of rounds)")
    lines.append("")
    return lines


def _legend() -> list[str]:
    return [f"[{tag}] {text}" for tag, text in MACHINE_DEPENDENCE.items()]


def _tally(targets: list[Target]) -> str:
    counts = {v: sum(t.verdict == v for t in targets) for v in ("PASS", "MISS", "SKIP")}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n)


def _targets_section(results: dict[str, Any], targets: list[Target]) -> list[str]:
    """Every target's verdict, what it compares and why, then the phases that failed."""
    lines = ["**Targets** (reported, not enforced). The second column says how far the figure depends "
             "on the machine:", ""]
    lines += [f"- {line}" for line in _legend()] + [""]
    lines += _table(["target", "depends on", "goal", "measured", "verdict"],
                    [[t.name, t.machine, t.goal, t.measured, f"**{t.verdict}**"] for t in targets])
    lines += ["What each target compares, and why it matters:", ""]
    lines += [f"- **{t.name}**: {t.compares}. It matters because {t.why}." for t in targets]
    lines.append("")
    if results.get("errors"):
        lines += ["Phases that failed:", ""]
        lines += [f"- {e['phase']}: {e['error']}" for e in results["errors"]]
        lines.append("")
    return lines


def format_targets(results: dict[str, Any], targets: list[Target], run_dir: Path | None = None) -> str:
    """What ``make bench`` prints at the end: the machine, a legend, then
    per target its verdict, goal and figure, what it compares and why it
    matters; last the tally and where the detailed report is."""
    meta = results["meta"]
    out = [
        f"Targets, profile {meta['profile']}: PASS or MISS against the goals of docs/performance.md "
        "(\"Targets\"); SKIP when a figure was not measured, with the reason. They are reported, not "
        "enforced.",
        f"Machine: {describe(meta)}.",
        "Every process of the run (nodes, echo server, NATS, load generator) shares these cores. The tag "
        "after each target says how far its figure depends on the machine:",
        *(f"  {line}" for line in _legend()),
    ]
    note = size_note(results)
    if note:
        out.append(note)
    for t in targets:
        out += [
            "",
            f"{t.verdict:4}  {t.name} [{t.machine}]",
            f"      goal {t.goal}; " + (t.measured if t.verdict == "SKIP" else f"measured {t.measured}"),
            f"      compares {t.compares}",
            f"      matters because {t.why}",
        ]
    out += ["", f"{_tally(targets)} of {len(targets)} targets."]
    if results.get("errors"):
        out.append("Phases that failed: " + "; ".join(f"{e['phase']}: {e['error']}" for e in results["errors"]))
    if run_dir is not None:
        out.append(f"Detailed report: {run_dir / 'results.md'} (every table; the same in "
                   f"{run_dir.parent / 'latest.md'}), results.json (every figure) and the plots beside it.")
    return "\n".join(out)


def markdown(results: dict[str, Any], targets: list[Target]) -> str:
    """The human view of one run: header, then one section per measurement, then the targets."""
    lines = _header(results)
    lines += _max_section(results)
    lines += _cpu_section(results)
    lines += _sweep_section(results)
    lines += _scenario_sections(results)
    lines += _paired_section(results)
    lines += _lanes_section(results)
    lines += _nats_section(results)
    lines += _targets_section(results, targets)
    return "\n".join(lines)


def write_run(run_dir: Path, results: dict[str, Any], targets: list[Target]) -> str:
    run_dir.mkdir(parents=True, exist_ok=True)
    results = {**results, "targets": [t.to_dict() for t in targets]}
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, sort_keys=False, allow_nan=False) + "\n")
    md = markdown(results, targets)
    (run_dir / "results.md").write_text(md + "\n")
    (run_dir.parent / "latest.md").write_text(md + "\n")
    return md


def update_docs(doc: Path, md: str) -> bool:
    """Replace the marked block of ``doc`` with ``md``; False if no markers."""
    text = doc.read_text()
    if DOCS_BEGIN not in text or DOCS_END not in text:
        return False
    head, rest = text.split(DOCS_BEGIN, 1)
    _, tail = rest.split(DOCS_END, 1)
    doc.write_text(f"{head}{DOCS_BEGIN}\n{md}\n{DOCS_END}{tail}")
    return True
