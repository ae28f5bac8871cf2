"""``python -m bench.firststart``: how a new cluster starts, the way users start it.

For each round, three members with empty data directories start in a random
order with random gaps, with no bootstrap flag, either as upstream's users
start them (``serve --quorum-peers URL,... --quorum-writes 2`` with
``AI_MEMORY_DB``) or from ``cluster init`` configs (``serve --config``). It
reports, per round, the order and gaps, the time from the last member's
start until every member serves (``/health`` 200, ``state: serving``), and
whether each member bootstrapped or was seeded. Ends with the number of
rounds that formed a cluster.

    .venv/bin/python -m bench.firststart [--rounds 20] [--gap-max 5] [--mode both]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 90.0


def _free_base(count: int = 3) -> int:
    for _ in range(500):
        base = random.randint(20000, 60000 - count)
        socks: list[socket.socket] = []
        try:
            for i in range(count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI_MEMORY_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _members(mode: str, work: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    base = _free_base()
    serve = [sys.executable, "-m", "cli", "serve"]
    if mode == "upstream":
        urls = ",".join(f"http://127.0.0.1:{base + i}" for i in range(3))
        return [(f"http://127.0.0.1:{base + i}",
                 [*serve, "--port", str(base + i), "--quorum-peers", urls, "--quorum-writes", "2"],
                 _env(AI_MEMORY_DB=str(work / f"m{i}" / "ai-memory.db"))) for i in range(3)]
    conf = work / "conf"
    subprocess.run([sys.executable, "-m", "cli", "cluster", "init", "--out", str(conf),
                    "--base-port", str(base), "--data", str(work / "data")],
                   cwd=ROOT, env=_env(), check=True, capture_output=True)
    out = []
    for i in range(3):
        path = conf / f"node{i + 1}.toml"
        port = tomllib.loads(path.read_text())["server"]["port"]
        out.append((f"http://127.0.0.1:{port}", [*serve, "--config", str(path)], _env()))
    return out


def _serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/api/v1/health", timeout=1) as resp:
            return bool(json.loads(resp.read()).get("state") == "serving")
    except (OSError, ValueError, urllib.error.URLError):
        return False


def one_round(mode: str, gap_max: float, rng: random.Random) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="firststart-"))
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        members = _members(mode, work)
        order = rng.sample(range(3), 3)
        gaps = [0.0, *sorted(rng.uniform(0, gap_max) for _ in range(2))]
        started = time.monotonic()
        for k, i in enumerate(order):
            time.sleep(max(0.0, started + gaps[k] - time.monotonic()))
            _url, argv, env = members[i]
            log = work / f"{i}.log"
            logs.append(log)
            with open(log, "wb") as fh:
                procs.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=fh,
                                              stderr=subprocess.STDOUT))
        last = time.monotonic()
        deadline = last + TIMEOUT_S
        ok = False
        while time.monotonic() < deadline:
            if all(_serving(m[0]) for m in members):
                ok = True
                break
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.05)
        took = time.monotonic() - last
        texts = [log.read_text(errors="replace") for log in logs]
        # A member that exited says why (a port taken by another program, say).
        why = "; ".join(f"member {order[k]} exited {p.returncode}: "
                        + " | ".join(texts[k].strip().splitlines()[-3:])
                        for k, p in enumerate(procs) if p.poll() is not None) if not ok else ""
        return {"mode": mode, "order": order, "gaps_s": [round(g, 2) for g in gaps], "ok": ok,
                "secs_after_last": round(took, 2), "why": why,
                "bootstrapped": sum("bootstrapping a new cluster" in t for t in texts),
                "seeded": sum("seeded from" in t for t in texts)}
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--gap-max", type=float, default=5.0, help="seconds between starts, at most")
    ap.add_argument("--mode", choices=("upstream", "config", "both"), default="both")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    modes = ("upstream", "config") if args.mode == "both" else (args.mode,)
    results = []
    for mode in modes:
        for r in range(args.rounds):
            res = one_round(mode, args.gap_max, rng)
            results.append(res)
            if not args.json:
                print(f"{mode:8} round {r + 1:2}: order {res['order']} gaps {res['gaps_s']} "
                      f"{'ok' if res['ok'] else 'FAILED'} {res['secs_after_last']} s after the "
                      f"last start; bootstrapped {res['bootstrapped']}, seeded {res['seeded']}"
                      + (f"\n    {res['why']}" if res["why"] else ""), flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for mode in modes:
        rs = [r for r in results if r["mode"] == mode]
        secs = sorted(float(str(r["secs_after_last"])) for r in rs if r["ok"])
        print(f"{mode}: {sum(1 for r in rs if r['ok'])} of {len(rs)} formed a cluster; "
              f"after the last start: median {round(statistics.median(secs), 2) if secs else '-'} s, "
              f"max {secs[-1] if secs else '-'} s; members seeded instead of bootstrapped: "
              f"{sum(int(str(r['seeded'])) for r in rs)}")


if __name__ == "__main__":
    main()
