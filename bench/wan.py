"""Members far apart: notify, forwarded-send and inbox-read latency over delayed peer links.

Three real nodes on loopback whose peer links all go through the test
proxy (``tests/cluster/proxy.py``) with ``--delay`` ms added each way, set
before the nodes start, as between machines in different regions (50 ms
round trip by default); with ``--layout two-sites`` only the links to and
from node3 are delayed, node1 and node2 being 1 ms apart each way (two
members in one site, one across the WAN). ``--clients`` closed-loop
clients then call node1 (the entry) for ``--seconds`` each: ``POST
/notify`` (a quorum write: one round trip to the nearest peer at best),
``POST /messages`` to projects whose mailbox another member owns (forwarded
to the owner, which writes it with a quorum: two round trips at best), and
``GET /inbox`` (a quorum read: one pull from the nearest peer at best). It
prints the rate and latency of each, and the entry's peer batches and how
many of them left while another was in flight to the same peer
(``peer_batches_overlapped_total``: daemon/peer/pacing.py).

Run: ``python -m bench.wan [--delay 25] [--layout even|two-sites] [--clients 8] [--seconds 12]``.
The harness comes from the tests (the proxy is a test fixture), so run it
from the repository root.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.cluster.harness import Cluster
from tests.cluster.proxy import DELAY
from tests.cluster.test_claims import A, B, owner_order, setup_projects

ENTRY = "node1"


def _far_projects(c: Cluster, n: int) -> list[str]:
    """``n`` projects whose mailbox a member other than the entry owns, each with a session."""
    found: list[str] = []
    i = 0
    while len(found) < n:
        i += 1
        scope = {"workspace": B["workspace"], "project": f"far-{i}"}
        if owner_order(c, scope)[0] == ENTRY:
            continue
        code, body = c.call(ENTRY, "POST", "/api/v1/sessions", {**scope, "harness": "claude-code"},
                            timeout=30)
        if code != 201:
            raise RuntimeError(f"session for {scope}: {code} {body}")
        found.append(scope["project"])
    return found


def _drive(c: Cluster, kind: str, clients: int, seconds: float,
           projects: list[str]) -> dict[str, Any]:
    lat: list[float] = []
    errors: list[Any] = []
    stop = time.monotonic() + seconds

    def worker(w: int) -> None:
        i = 0
        while time.monotonic() < stop:
            i += 1
            method = "POST"
            if kind == "notify":
                path, body = "/api/v1/notify", {"agent_id": f"a{w}", "target_agent_id": f"b{w}",
                                               "title": "t", "payload": f"p{i}"}
            elif kind == "inbox":
                method, path, body = "GET", f"/api/v1/inbox?agent_id=b{w}&limit=5", None
            else:
                path, body = "/api/v1/messages", {  # a mailbox keeps at most 256 pending
                    "to_workspace": B["workspace"], "to_project": projects[(w + i * clients)
                                                                           % len(projects)],
                    "from_workspace": A["workspace"], "from_project": A["project"],
                    "body": f"w{w}-{i}"}
            t = time.monotonic()
            code, out = c.call(ENTRY, method, path, body, timeout=30)
            if code not in (200, 201):
                errors.append((code, out))
                continue
            lat.append(time.monotonic() - t)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat.sort()

    def q(p: float) -> float:
        return 1000 * lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")

    return {"kind": kind, "rate": len(lat) / seconds, "p50": q(0.5), "p90": q(0.9),
            "p99": q(0.99), "max": 1000 * lat[-1] if lat else float("nan"),
            "errors": len(errors), "first_error": errors[0] if errors else None}


def _link_counters(c: Cluster) -> dict[str, float]:
    _, text = c.call(ENTRY, "GET", "/api/v1/metrics")
    out: dict[str, float] = {}
    for line in str(text).splitlines():
        for name in ("peer_batches_total", "peer_batches_overlapped_total"):
            if line.startswith(f"ai_memory_{name}{{"):
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.wan", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delay", type=int, default=25, help="ms added each way on every peer link")
    ap.add_argument("--layout", choices=("even", "two-sites"), default="even",
                    help="every link delayed, or only those of node3 (node1-node2: 1 ms each way)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=12.0, help="per workload")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(Path(tmp), quorum_timeout_ms=max(2000, 20 * args.delay))
        try:
            for src in c.ids:
                for dst in c.ids:
                    if src != dst:
                        far = args.layout == "even" or "node3" in (src, dst)
                        c.net.set(src, dst, DELAY, delay_ms=args.delay if far else 1)
            c.start()
            setup_projects(c)
            projects = _far_projects(c, 8 * args.clients)
            where = ("every peer link" if args.layout == "even"
                     else "node3's peer links (node1-node2: 1 ms)")
            print(f"3 nodes, {where} delayed {args.delay} ms each way, "
                  f"{args.clients} closed-loop clients on {ENTRY}, {args.seconds:g} s each")
            for kind in ("notify", "send", "inbox"):
                before = _link_counters(c)
                r = _drive(c, kind, args.clients, args.seconds, projects)
                after = _link_counters(c)
                batches = after.get("peer_batches_total", 0) - before.get("peer_batches_total", 0)
                overlapped = (after.get("peer_batches_overlapped_total", 0)
                              - before.get("peer_batches_overlapped_total", 0))
                print(f"{kind:6s} {r['rate']:7.1f}/s  p50 {r['p50']:6.1f} ms  p90 {r['p90']:6.1f}"
                      f"  p99 {r['p99']:6.1f}  max {r['max']:6.1f}  errors {r['errors']}  "
                      f"entry's peer batches {batches:.0f}, {overlapped:.0f} beside another")
                if r["first_error"] is not None:
                    print(f"       first error: {r['first_error']}")
        finally:
            c.stop()


if __name__ == "__main__":
    main()
