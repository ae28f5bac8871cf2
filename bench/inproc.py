"""``python -m bench.inproc --base-rev REV``: one node's CPU per request, in one process.

The cluster benchmarks measure servers in processes of their own, which on
a shared 2-core machine also measures who else wants the cores: a change
worth 3 % of a notify's CPU drowns in it. Here one process holds a real
single-member node (real SQLite file, the real aiohttp app behind the same
``BoundaryRunner`` as ``ai-memory serve``, uvloop) and the lean load client
(:mod:`bench.rawhttp`) driving it over loopback with ``--concurrency``
requests in flight, and reads the process's own CPU time
(``time.process_time``: every thread, the SQLite writer's included) over
``--requests`` requests after a warm-up. No other process takes part in a
request, so the figure moves little with the machine's load.

The client's CPU is inside the figure and the same for both builds, so the
*difference* between two builds is the servers' alone. A parent process
runs a child per measurement, with ``PYTHONPATH`` pointed at the base build
(``--base-rev``, unpacked with ``git archive``) or at this tree, alternating
the order every round, and prints the medians, the median of the per-round
differences and of the ratios.

Workloads: ``notify`` (POST /api/v1/notify), ``inbox`` (GET /api/v1/inbox,
limit 50, of a 1,000-message inbox), ``sendpop`` (a send and the pop
that claims it, on one of 8 projects; CPU per claim) and ``echo`` (the
notify request answered by :mod:`bench.echo`'s bare aiohttp app instead of
a node: the floor of client and HTTP stack, the same for both builds).

    .venv/bin/python -m bench.inproc --base-rev HEAD --rounds 8
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
WORKLOADS = ("notify", "inbox", "sendpop", "echo")
PROJECTS = tuple(f"bench-p{i}" for i in range(8))
PAYLOAD = "x" * 200


# -- the child: one measurement, on whatever build PYTHONPATH names -------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bench_module(name: str) -> Any:
    """bench/<name>.py of this tree, whatever build the servers come from."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"inproc_{name}", HERE.parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


async def _serve(workload: str, db: Path, port: int) -> tuple[Any, Any]:
    """(the runner serving on ``port``, the node or None): a single-member
    node behind ``ai-memory serve``'s runner, or bench/echo.py's app."""
    from aiohttp import web

    from daemon.api.app import build_app
    from daemon.http.errors import BoundaryRunner
    from daemon.settings import ClusterSettings, ServerSettings, Settings, StoreSettings
    from daemon.wiring import build_node

    node = None
    if workload == "echo":  # the floor: bench/echo.py's bare JSON echo, the same client and body
        runner = web.AppRunner(_bench_module("echo").make_app(), access_log=None)
    else:
        settings = Settings(server=ServerSettings(port=port), store=StoreSettings(db_path=str(db)),
                            cluster=ClusterSettings(node_id="node1", initial_state="new"),
                            log_level="warning")
        node = await build_node(settings)
        await node.start()
        runner = BoundaryRunner(build_app(node), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, node


class _Driver:
    """The workload's operations over one keep-alive client, counted."""

    def __init__(self, workload: str, url: str, concurrency: int) -> None:
        self.workload, self.url, self.concurrency = workload, url, concurrency
        self.session = _bench_module("rawhttp").RawSession((url,), concurrency, 30.0)
        self.counts = {"ok": 0, "claims": 0, "failed": 0}

    async def _post(self, path: str, agent: str, body: dict[str, Any]) -> tuple[int, bytes]:
        status, raw = await self.session.request("POST", self.url + path, headers={"X-Agent-Id": agent},
                                                 json=body)
        return int(status), raw

    async def prepare(self) -> None:
        if self.workload == "sendpop":
            for project in (*PROJECTS, "bench-sender"):
                status, raw = await self._post("/api/v1/sessions", "bench-mailer", {
                    "workspace": "bench", "project": project, "harness": "bench",
                    "session_id": f"bench-{project}"})
                assert status in (200, 201), raw
        if self.workload == "inbox":
            for i in range(1000):
                await self._post("/api/v1/notify", "bench-sender", {
                    "target_agent_id": "bench-reader", "title": f"n{i}", "payload": PAYLOAD,
                    "agent_id": "bench-sender"})

    async def one(self, i: int) -> None:
        if self.workload in ("notify", "echo"):
            status, _ = await self._post("/api/v1/notify", "bench-sender", {
                "target_agent_id": f"agent-{i % 64}", "title": "bench notify", "payload": PAYLOAD,
                "priority": 5, "tier": "mid", "agent_id": "bench-sender"})
        elif self.workload == "inbox":
            status, _ = await self.session.request(
                "GET", self.url + "/api/v1/inbox", headers={"X-Agent-Id": "bench-reader"},
                params={"agent_id": "bench-reader", "limit": "50", "unread_only": "false"})
        else:
            project = PROJECTS[i % len(PROJECTS)]
            status, _ = await self._post("/api/v1/messages", "bench-mailer", {
                "to_workspace": "bench", "to_project": project, "from_workspace": "bench",
                "from_project": "bench-sender", "from_agent": "bench-mailer", "subject": "bench",
                "body": PAYLOAD, "nature": "unknown"})
            if 200 <= status < 300:
                status, raw = await self._post("/api/v1/messages/pop", "bench-popper", {
                    "workspace": "bench", "project": project, "request_id": uuid.uuid4().hex})
                if 200 <= status < 300 and json.loads(raw).get("message") is not None:
                    self.counts["claims"] += 1
        self.counts["ok" if 200 <= status < 300 else "failed"] += 1

    async def drive(self, n: int) -> None:
        import asyncio

        it = iter(range(n))

        async def worker() -> None:
            for i in it:
                await self.one(i)
        await asyncio.gather(*(worker() for _ in range(self.concurrency)))


async def _child(workload: str, requests: int, concurrency: int, db: Path) -> dict[str, Any]:
    port = _free_port()
    runner, node = await _serve(workload, db, port)
    driver = _Driver(workload, f"http://127.0.0.1:{port}", concurrency)
    try:
        await driver.prepare()
        await driver.drive(max(200, requests // 5))  # warm-up
        driver.counts.update(ok=0, claims=0, failed=0)
        cpu, wall = time.process_time(), time.perf_counter()
        await driver.drive(requests)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await driver.session.close()
        await runner.cleanup()
        if node is not None:
            await node.stop()
    counts = driver.counts
    ops = counts["claims"] if workload == "sendpop" else counts["ok"]
    return {"workload": workload, "ops": ops, "failed": counts["failed"],
            "cpu_us_per_op": cpu * 1e6 / ops if ops else None, "rate": ops / wall if wall else None}


def child_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=WORKLOADS, required=True)
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--concurrency", type=int, required=True)
    args = ap.parse_args(argv)

    import uvloop

    with tempfile.TemporaryDirectory(prefix="ai-memory-inproc-") as d:
        coro = _child(args.workload, args.requests, args.concurrency, Path(d) / "node.db")
        res = uvloop.run(coro)
    print(json.dumps(res))
    return 0


# -- the parent: alternate the builds ------------------------------------------------

def _measure(tree: Path, workload: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(HERE), "--child", "--workload", workload,
                          "--requests", str(args.requests), "--concurrency", str(args.concurrency)],
                         env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{workload} on {tree}: {out.stderr[-2000:]}")
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if res["failed"] or not res["cpu_us_per_op"]:
        raise RuntimeError(f"{workload} on {tree}: {res}")
    return res


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m bench.inproc", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--base-rev", help="a git revision of this repository: the base build")
    src.add_argument("--base-dir", type=Path, help="a directory holding the base build's packages")
    ap.add_argument("--workloads", default="notify,sendpop")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--json", type=Path, help="also write every figure here")
    args = ap.parse_args(argv)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if set(workloads) - set(WORKLOADS):
        ap.error(f"workloads are {', '.join(WORKLOADS)}")
    from bench.ab import unpacked
    from bench.machine import describe, host

    meta: dict[str, Any] = {**host(), "loadavg_start": list(os.getloadavg()),
                            "base": args.base_rev or str(args.base_dir)}
    results: dict[str, list[dict[str, Any]]] = {w: [] for w in workloads}
    with ExitStack() as stack:
        base = stack.enter_context(unpacked(args.base_rev)) if args.base_rev else args.base_dir
        trees = {"base": base, "new": REPO}
        for rnd in range(args.rounds):
            order = ["base", "new"] if rnd % 2 == 0 else ["new", "base"]
            for w in workloads:
                for build in order:
                    res = {**_measure(trees[build], w, args), "build": build, "round": rnd}
                    results[w].append(res)
                    print(f"  round {rnd + 1} {w:<8} {build:<4} {res['cpu_us_per_op']:7.1f} us/op "
                          f"{res['rate']:8,.0f}/s  load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    meta["loadavg_end"] = list(os.getloadavg())
    print(f"Machine: {describe(meta)}.")
    print(f"One process: node + lean client, CPU per op (client included, the same for both builds); "
          f"base {meta['base']} against this tree; {args.rounds} rounds of {args.requests} ops.\n")
    print("| workload | base us/op | new us/op | new - base us (median of rounds) | new / base |")
    print("| --- | --- | --- | --- | --- |")
    for w, rs in results.items():
        by = {b: {r["round"]: r["cpu_us_per_op"] for r in rs if r["build"] == b} for b in ("base", "new")}
        diffs = [by["new"][k] - by["base"][k] for k in by["base"] if k in by["new"]]
        ratios = [by["new"][k] / by["base"][k] for k in by["base"] if k in by["new"]]
        print(f"| {w} | {statistics.median(by['base'].values()):.1f} | {statistics.median(by['new'].values()):.1f} | "
              f"{statistics.median(diffs):+.1f} ({', '.join(f'{d:+.0f}' for d in diffs)}) | "
              f"{statistics.median(ratios):.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
