"""``ai-memory listen``: latency from send to the command starting, and
events lost or run twice across node kills. Prints figures; asserts nothing.

Starts three ``ai-memory serve`` nodes on loopback (W=2) and one listener
(``listen --url node1,node2,node3 --exec ...``) that follows node1 first.
The command appends the event's id and the time it started (``date
+%s%N``, so the shell's and ``date``'s start, about a millisecond, is
included) to a file.

0. With ``--single``: the latency series below against a one-node cluster.
1. Latency: notifications sent one at a time (a short pause between, so
   commands do not queue behind each other) through node1, the node the
   listener follows, then through node2 (the event crosses nodes); p50 and
   p99 of (command start - just before the POST) for each.
2. Kills: ``--kills`` rounds; each kill -9's one node in turn (every third
   one the node the listener follows), sends events through the others
   while it is down, restarts it and sends more. At the end: events sent,
   handled, lost (never handled) and run twice.

Run: ``python -m bench.listen_latency [--events 200] [--kills 20]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.procs import START_TIMEOUT_S, Cluster, _repo_root, post_json

APPEND = 'printf "%s %s\\n" "$AI_MEMORY_EVENT_ID" "$(date +%s%N)" >> "$LISTEN_OUT"'


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, work: Path, cluster: Cluster) -> None:
        self.work, self.cluster = work, cluster
        self.out = work / "handled.txt"
        self.sent: list[str] = []
        self.sent_ns: dict[str, int] = {}
        self.seq = 0

    def start_listener(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LISTEN_OUT": str(self.out),
               "PYTHONPATH": _repo_root() + os.pathsep + os.environ.get("PYTHONPATH", "")}
        err = open(self.work / "listener.stderr", "ab")  # the child keeps its own copy
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "--agent-id", "bob", "listen", "--url",
             ",".join(self.cluster.urls), "--state", str(self.work / "state.json"),
             "--exec", APPEND, "--concurrency", "8"], env=env, stderr=err,
            stdout=subprocess.DEVNULL)
        err.close()
        deadline = time.monotonic() + 30
        while "listen: following" not in (self.work / "listener.stderr").read_text():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the listener never connected")
            time.sleep(0.05)
        return proc

    def send(self, node: int) -> str:
        self.seq += 1
        title = f"bench-{self.seq}"
        before = time.time_ns()
        code, body = post_json(self.cluster.nodes[node].url + "/api/v1/notify",
                               {"target_agent_id": "bob", "title": title},
                               headers={"X-Agent-Id": "alice", "Idempotency-Key": title})
        if code != 201:
            raise RuntimeError(f"notify through node{node + 1}: {code} {body}")
        nid = str(body["id"])
        self.sent.append(nid)
        self.sent_ns[nid] = before
        return nid

    def handled(self) -> dict[str, list[int]]:
        seen: dict[str, list[int]] = {}
        if self.out.exists():
            for line in self.out.read_text().splitlines():
                nid, _, at = line.partition(" ")
                seen.setdefault(nid, []).append(int(at))
        return seen

    def wait_all(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if set(self.sent) <= set(self.handled()):
                return
            time.sleep(0.05)

    def latency(self, node: int, events: int, pause: float) -> list[float]:
        ids = []
        for _ in range(events):
            ids.append(self.send(node))
            time.sleep(pause)
        self.wait_all()
        seen = self.handled()
        return [(seen[i][0] - self.sent_ns[i]) / 1e6 for i in ids if i in seen]

    def kills(self, rounds: int, per_phase: int) -> None:
        nodes = self.cluster.nodes
        for r in range(rounds):
            victim = nodes[r % len(nodes)]
            assert victim.proc is not None
            os.kill(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait()
            live = [i for i, n in enumerate(nodes) if n is not victim]
            for k in range(per_phase):
                self.send(live[k % len(live)])
            victim.launch()
            victim.wait_healthy(START_TIMEOUT_S)
            for k in range(per_phase):
                self.send(k % len(nodes))
            print(f"  kill {r + 1}/{rounds}: {victim.name}; sent {len(self.sent)} so far",
                  flush=True)
        self.wait_all(120)


def _report(name: str, values: list[float]) -> None:
    print(f"{name}: n={len(values)} p50={_pct(values, 0.5):.1f} ms "
          f"p99={_pct(values, 0.99):.1f} ms max={max(values):.1f} ms")


def _single(work: Path, args: argparse.Namespace) -> None:
    cluster = Cluster(work, 1, 1).start()
    listener = None
    try:
        bench = Bench(work, cluster)
        listener = bench.start_listener()
        _report("one-node cluster: send -> command start     ",
                bench.latency(0, args.events, args.pause))
    finally:
        if listener is not None:
            listener.terminate()
            listener.wait(30)
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.listen_latency")
    parser.add_argument("--events", type=int, default=200, help="per latency series")
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between two sends")
    parser.add_argument("--kills", type=int, default=20, help="node kills (0: none)")
    parser.add_argument("--per-phase", type=int, default=5,
                        help="events sent while a node is down, and again after")
    parser.add_argument("--single", action="store_true",
                        help="first, the same latency series against a one-node cluster")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="listen-bench-") as tmp:
        work = Path(tmp)
        if args.single:
            _single(work / "single", args)
        cluster = Cluster(work, 3, 2).start()
        listener = None
        try:
            bench = Bench(work, cluster)
            listener = bench.start_listener()
            _report("send via node1 (the listener's node) -> command start",
                    bench.latency(0, args.events, args.pause))
            _report("send via node2 (across nodes)       -> command start",
                    bench.latency(1, args.events, args.pause))
            if args.kills:
                before = len(bench.sent)
                bench.kills(args.kills, args.per_phase)
                seen = bench.handled()
                counts = Counter({i: len(seen.get(i, [])) for i in bench.sent})
                lost = sum(1 for n in counts.values() if n == 0)
                twice = sum(1 for n in counts.values() if n > 1)
                moves = (work / "listener.stderr").read_text().count("listen: following") - 1
                print(f"kills: {args.kills}; events sent during them {len(bench.sent) - before} "
                      f"(total {len(bench.sent)}); lost {lost}; run twice {twice}; "
                      f"the listener reconnected {moves} times")
        finally:
            if listener is not None:
                listener.terminate()
                listener.wait(30)
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
