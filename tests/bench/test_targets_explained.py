"""The benchmark's verdicts must read on their own: every target line says
what it compares with what, why that matters and how far its figure
depends on the machine; the report names the machine (cores, CPU model,
load average); and a goal stated for 100k is restated for the size a run
really measured, the verdict taken against the restated goal."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.targets import MACHINE_DEPENDENCE, TARGETS, evaluate
from tests.bench.test_lanes_bench import _section
from tests.bench.test_smoke import _results


def _quick() -> dict[str, Any]:
    results = _results()
    results["lanes"] = _section()  # every target measured: none says SKIP
    results["meta"].update(cores=2, cpu_model="Test CPU 9000", memory_bytes=8 * 2**30,
                           loadavg_start=[1.5, 1.0, 0.9], loadavg_end=[3.25, 2.0, 1.0])
    return results


def test_every_target_says_what_it_compares_why_and_how_machine_bound() -> None:
    assert len({s.name for s in TARGETS}) == len(TARGETS)
    for spec in TARGETS:
        assert spec.compares and spec.why, spec.name
        assert spec.machine in MACHINE_DEPENDENCE, spec.name
    for t in evaluate(_quick()):
        assert t.compares and t.why and t.machine in MACHINE_DEPENDENCE, t


def test_the_printed_lines_carry_the_explanations_and_the_machine(tmp_path: Path) -> None:
    results = _quick()
    targets = evaluate(results)
    text = report.format_targets(results, targets, tmp_path / "run")
    assert "Machine: 2 cores, Test CPU 9000, 8 GiB; load average (1 min) 1.5 at the start, 3.2 at the end" in text
    assert "(above 2: other work competed for the cores)" in text
    for tag, meaning in MACHINE_DEPENDENCE.items():
        assert f"[{tag}] {meaning}" in text
    blocks = text.split("\n\n")
    for t in targets:
        block = next(b for b in blocks if b.startswith(f"{t.verdict:4}  {t.name} [{t.machine}]\n"))
        assert f"goal {t.goal}; measured {t.measured}" in block or (
            t.verdict == "SKIP" and f"goal {t.goal}; {t.measured}" in block)
        assert f"compares {t.compares}" in block
        assert f"matters because {t.why}" in block
    verdicts = [t.verdict for t in targets]
    assert f"{verdicts.count('PASS')} PASS, {verdicts.count('MISS')} MISS of {len(targets)} targets." in text
    assert f"Detailed report: {tmp_path / 'run' / 'results.md'}" in text

    md = report.markdown(results, targets)
    assert "Machine: 2 cores, Test CPU 9000" in md
    assert "| target | depends on | goal | measured | verdict |" in md
    for t in targets:
        assert f"- **{t.name}**: {t.compares}. It matters because {t.why}." in md


def test_goals_stated_for_100k_are_restated_for_the_sizes_measured() -> None:
    results = _quick()  # a 20k inbox, 21k missed ops, 21k messages stored
    by_name = {t.name: t for t in evaluate(results)}
    inbox = by_name["inbox read p99, largest inbox (limit 50)"]
    assert inbox.goal.startswith("p99 <= 10 ms and <= 2x the 1k inbox, at 20,000 messages (stated for 100k")
    rss = by_name["RSS per node"]
    assert rss.goal.startswith("< 150 MB with 21,000 messages stored (stated for 100k")
    catchup = by_name["catch-up of missed ops"]
    assert catchup.goal.startswith("<= 2.1 s for the 21,000 ops missed here")
    assert "100k ops" not in catchup.goal and "with 100k messages" not in rss.goal
    note = report.size_note(results)
    assert note is not None and "the restarted node missed 21,000 ops" in note
    assert note in report.format_targets(results, evaluate(results))

    # The verdict follows the restated goal: 10 s per 100k ops is 2.1 s for 21k.
    for seconds, verdict in ((2.0, "PASS"), (2.2, "MISS")):
        r = copy.deepcopy(results)
        r["scenario"]["catchup"]["restart_to_converged_s"] = seconds
        assert {t.name: t.verdict for t in evaluate(r)}["catch-up of missed ops"] == verdict

    # At the stated size the goals read as stated, and no size note is printed.
    full = copy.deepcopy(results)
    full["meta"]["profile"] = "full"
    full["meta"]["profile_settings"]["inbox_sizes"] = [1000, 10_000, 100_000]
    full["scenario"]["inbox"][-1].update(size=100_000)
    full["scenario"]["catchup"].update(missed_ops=100_000, restart_to_converged_s=9.0)
    full["scenario"]["messages_stored"] = 111_000
    by_name = {t.name: t for t in evaluate(full)}
    assert by_name["catch-up of missed ops"].goal == "<= 10 s for 100,000 ops"
    assert by_name["catch-up of missed ops"].verdict == "PASS"
    assert by_name["inbox read p99, largest inbox (limit 50)"].goal == (
        "p99 <= 10 ms and <= 2x the 1k inbox, at 100,000 messages")
    assert report.size_note(full) is None


@pytest.mark.parametrize("missing", ["scenario", "echo"])
def test_a_skipped_target_keeps_its_explanation(missing: str) -> None:
    results = _quick()
    results[missing] = None
    skipped = [t for t in evaluate(results) if t.verdict == "SKIP"]
    assert skipped
    for t in skipped:
        assert t.compares and t.why and t.measured.startswith("not measured")
    text = report.format_targets(results, evaluate(results))
    for t in skipped:
        assert f"SKIP  {t.name} [{t.machine}]\n      goal {t.goal}; not measured (" in text
    if missing == "scenario":
        assert report.size_note(results) is None  # no sizes measured, none to restate
