"""One benchmark run from start to finish.

Order: the echo ceiling; a 1-node cluster (every workload); a 3-node W=2
cluster (every workload, then the catch-up / inbox / RSS scenario on the
same cluster); the paired rounds (a fresh echo server, 1-node and 3-node
cluster side by side, their notify maximum measured in alternating
rounds, for the ratio targets); the lanes rounds (one node started plain
against one with 2 lanes, lean client, :mod:`bench.lanes`); then NATS JetStream (every profile;
skipped, with the reason, where it is not installed). Each phase runs inside
:func:`_phase`, which records a failure in ``results["errors"]`` and moves
on, so a half-built daemon still yields a report that says what failed. All
servers run in a temp dir that is removed at the end (their logs are
copied into the run directory first); the load pool and every server are
stopped on any exit.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import lanes, machine, nats_compare, phases, plots, report
from bench.loadgen import LoadPool
from bench.procs import Cluster, echo_server, http_json, running
from bench.profiles import Profile
from bench.progress import Progress
from bench.targets import ECHO, NOMINAL, Target, evaluate
from bench.workloads import WorkloadSpec

PHASES = ("echo", "cluster1", "cluster3", "scenario", "paired", "lanes", "nats")
REPO = Path(__file__).resolve().parent.parent


def _git_commit() -> str | None:
    """HEAD's short hash, marked ``+dirty`` when tracked files differ from it
    (the servers run the working tree, not the commit)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + "+dirty" if dirty else head) or None


def _count_steps(profile: Profile, only: tuple[str, ...]) -> int:
    per_workload = 1 + len(profile.sweep_fractions)
    n = per_workload if "echo" in only else 0
    n += sum(len(profile.workloads) * per_workload for c in ("cluster1", "cluster3") if c in only)
    if "scenario" in only:
        n += len(profile.inbox_sizes) + 1 + 2 * len(profile.inbox_sizes) * len(profile.inbox_consistencies)
    if "paired" in only:
        n += 3 * profile.paired_rounds
    if "lanes" in only:
        n += 3 * profile.lanes_rounds
    if "nats" in only and profile.nats:
        n += 1
    return n


class Run:
    def __init__(self, profile: Profile, out_root: Path, *, progress: bool = True,
                 only: tuple[str, ...] = PHASES, lanes: int = 0) -> None:
        self.profile = profile
        self.only = only
        self.lanes = lanes  # the clusters' nodes run ``serve --lanes N`` (0: plain)
        self.run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        self.run_dir = out_root / self.run_id
        self.workdir = Path(tempfile.mkdtemp(prefix="ai-memory-bench-"))
        self.progress = Progress(_count_steps(profile, only), enabled=progress)
        self.results: dict[str, Any] = {
            "meta": {
                "run_id": self.run_id,
                "profile": profile.name,
                "profile_settings": profile.to_dict(),
                **{k: v for k, v in machine.host().items() if k != "loadavg"},
                "python": platform.python_version(),
                "platform": platform.platform(),
                "commit": _git_commit(),
                "daemon_version": None,
                "loadavg_start": list(os.getloadavg()),
                "loadavg_end": None,
                "phases": list(only),
                "lanes": lanes,
            },
            "echo": None,
            "workloads": [],
            "scenario": None,
            "cluster_rss_after_workloads": {},
            "paired": None,
            "lanes": None,
            "nats": None,
            "errors": [],
        }

    def _phase(self, name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:  # a failed phase is a result, not the end of the run
            self.results["errors"].append({"phase": name, "error": f"{type(e).__name__}: {e}"})
            self.progress.note(f"[bench] phase {name} failed: {type(e).__name__}: {e}")
            (self.workdir / f"error-{len(self.results['errors'])}.txt").write_text(traceback.format_exc())
            return None

    def _workload_spec(self, name: str) -> WorkloadSpec:
        projects = tuple(f"bench-p{i}" for i in range(self.profile.projects))
        return WorkloadSpec(name, projects=projects if name in ("sendpop", "mix") else ())

    def _echo(self, pool: LoadPool) -> None:
        with running(echo_server(self.workdir)) as srv:
            res = phases.measure_workload(pool, self.progress, self.profile, "echo server", (srv.url,),
                                          WorkloadSpec("echo"), cpu_pids=((srv.name, srv.pid),))
        res["workload"] = "notify body"
        self.results["echo"] = res

    def _cluster(self, pool: LoadPool, size: int) -> None:
        cluster = Cluster(self.workdir / f"cluster{size}", size=size, write_quorum=2 if size > 1 else 1,
                          lanes=self.lanes)
        with running(cluster):
            health = http_json(cluster.urls[0] + "/api/v1/health")
            self.results["meta"]["daemon_version"] = health.get("version")
            self._phase(f"{cluster.label}: sessions", lambda: phases.setup_projects(
                cluster.urls, self._workload_spec("sendpop")))
            for name in self.profile.workloads:
                res = self._phase(f"{cluster.label}: {name}", functools.partial(
                    phases.measure_workload, pool, self.progress, self.profile, cluster.label, cluster.urls,
                    self._workload_spec(name), cpu_pids=cluster.pids()))
                self.results["workloads"].append(res or {"cluster": cluster.label, "workload": name,
                                                         "error": self.results["errors"][-1]["error"]})
            self.results["cluster_rss_after_workloads"][cluster.label] = cluster.rss()
            if size > 1 and "scenario" in self.only:
                self.results["scenario"] = self._phase(f"{cluster.label}: catch-up/inbox/RSS", lambda: (
                    phases.catchup_inbox_rss(pool, self.progress, self.profile, cluster, NOMINAL)))

    def _paired(self, pool: LoadPool) -> None:
        one = Cluster(self.workdir / "paired1", size=1, write_quorum=1, lanes=self.lanes)
        three = Cluster(self.workdir / "paired3", size=3, write_quorum=2, lanes=self.lanes)
        (self.workdir / "paired-echo").mkdir(parents=True, exist_ok=True)
        with running(echo_server(self.workdir / "paired-echo")) as echo, running(one), running(three):
            notify = self._workload_spec("notify")
            self.results["paired"] = phases.paired_rounds(pool, self.progress, self.profile, [
                (ECHO, (echo.url,), ((echo.name, echo.pid),), WorkloadSpec("echo")),
                (one.label, one.urls, one.pids(), notify),
                (three.label, three.urls, three.pids(), notify),
            ])

    def _lanes(self, pool: LoadPool) -> None:
        """One node started plain against one with 2 lanes (and a lane-aware client)."""
        one = Cluster(self.workdir / "lanes1", size=1, write_quorum=1, name=lanes.ONE_LANE)
        two = Cluster(self.workdir / "lanes2", size=1, write_quorum=1, lanes=lanes.LANES,
                      name=lanes.TWO_LANES)
        with running(one), running(two):
            self.results["lanes"] = lanes.rounds(pool, self.progress, self.profile,
                                                 lanes.systems(one, two), self.profile.lanes_rounds)

    def execute(self) -> tuple[dict[str, Any], list[Target], str]:
        try:
            with LoadPool(self.profile.loadgen_procs) as pool:
                if "echo" in self.only:
                    self._phase("echo", lambda: self._echo(pool))
                if "cluster1" in self.only:
                    self._phase("1 node", lambda: self._cluster(pool, 1))
                if "cluster3" in self.only or "scenario" in self.only:
                    self._phase("3 nodes", lambda: self._cluster(pool, 3))
                if "paired" in self.only:
                    self._phase("paired", lambda: self._paired(pool))
                if "lanes" in self.only:
                    self._phase("lanes", lambda: self._lanes(pool))
                if "nats" in self.only and self.profile.nats:
                    self.results["nats"] = self._phase("nats", lambda: nats_compare.run(
                        pool, self.progress, self.profile, self.workdir))
        finally:
            self.results["meta"]["loadavg_end"] = list(os.getloadavg())
            self.progress.close()
            self._keep_logs()
            shutil.rmtree(self.workdir, ignore_errors=True)
        targets = evaluate(self.results)
        md = report.write_run(self.run_dir, self.results, targets)
        plots.draw_all(self.results, self.run_dir)
        return self.results, targets, md

    def _keep_logs(self) -> None:
        logs = self.run_dir / "logs"
        for p in sorted(self.workdir.rglob("*.log")) + sorted(self.workdir.glob("error-*.txt")):
            logs.mkdir(parents=True, exist_ok=True)
            rel = p.relative_to(self.workdir)
            shutil.copyfile(p, logs / str(rel).replace(os.sep, "_"))


def print_targets(results: dict[str, Any], targets: list[Target], run_dir: Path | None = None) -> None:
    print(report.format_targets(results, targets, run_dir), file=sys.stdout)
