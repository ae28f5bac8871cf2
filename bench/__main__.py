"""``python -m bench --profile quick|full``: run the benchmark harness.

Starts the echo ceiling and real ``ai-memory serve`` clusters on loopback,
drives them from separate load-generator processes, prints PASS/MISS per
target and writes ``bench/results/<run>/`` (results.json, results.md,
PNG plots, server logs) and ``bench/results/latest.md``. ``--update-docs``
also copies the tables into docs/performance.md. Exit status is 0 when the
run completed, whatever the targets say (targets are reported, not
enforced), and 1 when a phase failed. ``--tls`` runs only the TLS cost
comparison (:mod:`bench.tls_cost`), ``--mcp`` only the MCP cost beside HTTP
(:mod:`bench.mcp_cost`). ``--lanes N`` starts every node with
``ai-memory serve --lanes N``; the ``lanes`` phase compares one node with 2
lanes against one started plain whatever it says (:mod:`bench.lanes`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from bench import report
from bench.profiles import PROFILES
from bench.runner import PHASES, REPO, Run, print_targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="ai-memory cluster benchmark harness")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="results root directory")
    parser.add_argument("--only", default=",".join(PHASES),
                        help=f"comma-separated subset of phases: {', '.join(PHASES)}")
    parser.add_argument("--concurrency", type=int, help="override the profile's client connections")
    parser.add_argument("--loadgen-procs", type=int, help="override the profile's load-generator processes")
    parser.add_argument("--client", choices=("raw", "aiohttp"),
                        help="the load generator's HTTP client (default aiohttp; raw costs 30-44 %% of its CPU per request)")
    parser.add_argument("--lanes", type=int, default=0, metavar="N",
                        help="start every node of the echo-to-paired phases with `ai-memory serve --lanes N` "
                             "(CPU summed over the supervisor and its lane processes); the lanes phase "
                             "always compares 2 lanes with a plain node")
    parser.add_argument("--lanes-rounds", type=int, help="override the profile's rounds of the lanes phase")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--update-docs", action="store_true", help="copy the tables into docs/performance.md")
    parser.add_argument("--tls", action="store_true",
                        help="only the TLS cost: server CPU per notify and per claim, plain and TLS "
                             "clusters in alternating rounds (bench/tls_cost.py)")
    parser.add_argument("--tls-rounds", type=int, default=6, help="with --tls: rounds per cluster")
    parser.add_argument("--tls-notifies", type=int, default=1500, help="with --tls: notifies per round")
    parser.add_argument("--tls-claims", type=int, default=480, help="with --tls: claims per round")
    parser.add_argument("--mcp", action="store_true",
                        help="only the MCP cost: server CPU per tool call over /mcp (official "
                             "client) beside the same requests over HTTP, one node "
                             "(bench/mcp_cost.py)")
    parser.add_argument("--mcp-rounds", type=int, default=4, help="with --mcp: rounds")
    parser.add_argument("--mcp-pairs", type=int, default=300,
                        help="with --mcp: pairs of each kind per transport and round")
    parser.add_argument("--mcp-sessions", type=int, default=16,
                        help="with --mcp: MCP sessions (and HTTP workers)")
    parser.add_argument("--mcp-rate", default="150,300",
                        help="with --mcp: calls/s of the paced rounds, the same for every "
                             "transport (comma-separated: one set of rounds each)")
    args = parser.parse_args(argv)
    if args.mcp:
        from bench import mcp_cost

        return mcp_cost.main(args.mcp_rounds, args.mcp_pairs, args.mcp_sessions,
                             tuple(float(r) for r in args.mcp_rate.split(",") if r.strip()))
    if args.tls:
        from bench import tls_cost

        return tls_cost.main(args.tls_rounds, args.tls_notifies, args.tls_claims)

    only = tuple(p.strip() for p in args.only.split(",") if p.strip())
    unknown = set(only) - set(PHASES)
    if unknown:
        parser.error(f"unknown phase(s): {', '.join(sorted(unknown))}")
    profile = PROFILES[args.profile]
    if args.concurrency:
        profile = dataclasses.replace(profile, concurrency=args.concurrency)
    if args.loadgen_procs:
        profile = dataclasses.replace(profile, loadgen_procs=args.loadgen_procs)
    if args.client:
        profile = dataclasses.replace(profile, client=args.client)
    if args.lanes_rounds:
        profile = dataclasses.replace(profile, lanes_rounds=args.lanes_rounds)
    if args.lanes < 0:
        parser.error("--lanes must be 0 (plain) or a lane count")

    run = Run(profile, args.out, progress=not args.no_progress, only=only, lanes=args.lanes)
    results, targets, md = run.execute()
    print()
    print_targets(results, targets, run.run_dir)
    if args.update_docs:
        doc = REPO / "docs" / "performance.md"
        if report.update_docs(doc, md):
            print(f"updated {doc}")
        else:
            print(f"{doc} has no {report.DOCS_BEGIN} block; not updated", file=sys.stderr)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
