"""Leases under chaos: killed claimers and killed nodes, counted.

Three nodes (W=2). Each round sends a few messages, starts a claimer
process that pops one with a 2 s lease through a random node and renews it,
kills that claimer with SIGKILL mid-lease, and in every other round kills
a node too (the mailbox's owner in turn with the others) and starts it
again a moment later. Meanwhile a worker pops with leases through the live
nodes and completes what it gets. The figures:

* redeliveries: messages handed out more than once (each killed claimer's
  message should be handed out exactly once more);
* two-holder violations: a claim answered before the previous holder's
  last known deadline (all processes share this machine's clock, so the
  owner's deadline is the holder's);
* lost (never completed) and completed twice;
* the delay from a killed claimer's deadline to the message's next claim
  (the owner's tick, or after a node kill the next owner's load and the
  sweep).

Run: ``python -m bench.lease_chaos [--rounds 20] [--per-round 4]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.procs import START_TIMEOUT_S, Cluster, _repo_root, post_json

WS, ASKER, DOER = "default", "lease-asker", "lease-doer"
# A claimer process: pops with a lease through URL, writes the claim and
# every renewal to OUT (fsynced), renews until killed. Arguments: URL OUT
# PROJECT (of workspace default) LEASE_SECONDS RENEW_EVERY_SECONDS.
# tests/cluster/test_leases.py runs it too.
CLAIMER = """
import json, os, sys, time, urllib.request
url, out, project = sys.argv[1], sys.argv[2], sys.argv[3]
lease, every = float(sys.argv[4]), float(sys.argv[5])
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "X-Agent-Id": "doomed"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())
got = post("/api/v1/messages/pop", {"workspace": "default", "project": project,
                                     "lease_seconds": lease})["message"]
if got is None:
    sys.exit(3)
with open(out, "a") as f:
    f.write(json.dumps(got) + "\\n"); f.flush(); os.fsync(f.fileno())
while True:
    time.sleep(every)
    renewed = post("/api/v1/messages/renew", {"message_id": got["id"],
                                               "claim_token": got["claim_token"]})
    with open(out, "a") as f:
        f.write(json.dumps({**got, **renewed}) + "\\n"); f.flush(); os.fsync(f.fileno())
"""


def _ms(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Chaos:
    def __init__(self, work: Path, cluster: Cluster, rng: random.Random) -> None:
        self.work, self.cluster, self.rng = work, cluster, rng
        self.sent: list[str] = []
        # message id -> [[answered at ms, token, last known deadline ms]]
        self.claims: dict[str, list[list[Any]]] = {}
        self.completed: dict[str, int] = {}
        self.doomed: list[tuple[str, float]] = []  # (message id, its last deadline)
        self.down: int | None = None
        self.seq = 0

    def live(self) -> list[int]:
        return [i for i in range(len(self.cluster.nodes)) if i != self.down]

    def call(self, path: str, body: dict[str, Any], agent: str = "worker") -> tuple[int, Any]:
        for _ in range(20):
            node = self.cluster.nodes[self.rng.choice(self.live())]
            try:
                code, out = post_json(node.url + path, body, headers={"X-Agent-Id": agent})
            except OSError:
                code, out = 599, None
            if code not in (503, 599):
                return code, out
            time.sleep(0.2)
        return code, out

    def send(self) -> None:
        self.seq += 1
        code, out = self.call("/api/v1/messages", {
            "to_workspace": WS, "to_project": DOER, "from_workspace": WS, "from_project": ASKER,
            "subject": f"job {self.seq}", "body": "work"})
        if code != 201:
            raise RuntimeError(f"send: {code} {out}")
        self.sent.append(out["message_id"])

    def claimer(self) -> None:
        log = self.work / f"claimer-{self.seq}.jsonl"
        url = self.cluster.nodes[self.rng.choice(self.live())].url
        env = {**os.environ, "PYTHONPATH": _repo_root()}
        proc = subprocess.Popen([sys.executable, "-c", CLAIMER, url, str(log), DOER, "2", "0.6"],
                                env=env,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while len(log.read_text().splitlines() if log.exists() else []) < 1 + self.rng.randint(0, 2):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        if lines:
            first = lines[0]
            until = max(_ms(x["lease_until"]) for x in lines)
            self.claims.setdefault(first["id"], []).append(
                [_ms(first["claimed_at"]), first["claim_token"], until])
            self.doomed.append((first["id"], until))

    def work_until_done(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while len(self.completed) < len(self.sent) and time.monotonic() < deadline:
            code, out = self.call("/api/v1/messages/pop",
                                  {"workspace": WS, "project": DOER, "lease_seconds": 15})
            if code != 200 or not out.get("message"):
                time.sleep(0.2)
                continue
            msg = out["message"]
            self.claims.setdefault(msg["id"], []).append(
                [time.time() * 1000, msg["claim_token"], _ms(msg["lease_until"])])
            code, _done = self.call("/api/v1/messages/complete", {
                "message_id": msg["id"], "result": "done", "claim_token": msg["claim_token"]})
            if code == 200:
                self.completed[msg["id"]] = self.completed.get(msg["id"], 0) + 1

    def kill_node(self, victim: int) -> None:
        proc = self.cluster.nodes[victim].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self.down = victim

    def revive(self) -> None:
        if self.down is not None:
            node = self.cluster.nodes[self.down]
            node.launch()
            node.wait_healthy(START_TIMEOUT_S)
            self.down = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lease_chaos")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=4, help="messages sent per round")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="lease-chaos-") as tmp:
        cluster = Cluster(Path(tmp), 3, 2).start()
        try:
            chaos = Chaos(Path(tmp), cluster, rng)
            for proj, harness in ((ASKER, "kimi"), (DOER, "codex")):
                chaos.call("/api/v1/sessions", {"workspace": WS, "project": proj,
                                                "harness": harness})
            started = time.monotonic()
            for r in range(args.rounds):
                for _ in range(args.per_round):
                    chaos.send()
                chaos.claimer()
                if r % 2 == 1:
                    chaos.kill_node(r // 2 % 3)
                chaos.work_until_done(timeout=10 if chaos.down is not None else 90)
                chaos.revive()
                chaos.work_until_done()
                print(f"  round {r + 1}/{args.rounds}: {len(chaos.sent)} sent, "
                      f"{len(chaos.completed)} completed", flush=True)
            took = time.monotonic() - started
        finally:
            cluster.stop()
    two = [(m, h) for m, h in chaos.claims.items()
           if any(nxt[0] < prev[2] for prev, nxt in itertools.pairwise(h))]
    lost = [m for m in chaos.sent if m not in chaos.completed]
    twice = [m for m, n in chaos.completed.items() if n > 1]
    redelivered = [m for m, h in chaos.claims.items() if len(h) > 1]
    doomed_ids = {m for m, _ in chaos.doomed}
    once_more = [m for m in doomed_ids if len(chaos.claims.get(m, [])) == 2]
    delays = [chaos.claims[m][1][0] - until for m, until in chaos.doomed
              if len(chaos.claims.get(m, [])) > 1]
    print(f"rounds {args.rounds} in {took:.0f} s; messages {len(chaos.sent)}; "
          f"claimers killed mid-lease {len(doomed_ids)}; node kills {args.rounds // 2}")
    print(f"redelivered {len(redelivered)} (killed claimers' messages handed out exactly once "
          f"more: {len(once_more)} of {len(doomed_ids)})")
    print(f"two-holder violations {len(two)}; lost {len(lost)}; completed twice {len(twice)}")
    print(f"deadline -> next claim: p50 {_pct(delays, 0.5):.0f} ms, "
          f"p99 {_pct(delays, 0.99):.0f} ms, max {max(delays, default=0):.0f} ms")
    return 0 if not (two or lost or twice) and len(once_more) == len(doomed_ids) else 1


if __name__ == "__main__":
    raise SystemExit(main())
