"""A stand-in for `ai-memory serve` in `cluster up` tests (run as a script).

It takes the same flags `cluster up` passes, answers ``/api/v1/health`` with
its node id on loopback, records its arguments and environment in
``{db}.args.json``, and exits 0 on SIGTERM. ``FAKE_NODE_MODE`` picks a
misbehaviour: ``die:NODE`` (NODE exits with 3 shortly after becoming
healthy), ``crash:NODE`` (NODE exits with 5 before listening),
``stubborn:NODE`` (NODE ignores SIGTERM), ``slow:NODE`` (NODE starts
listening only after ``FAKE_NODE_DELAY`` seconds, 3 by default); NODE
``*`` is every node.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--quorum-writes", type=int, required=True)
    parser.add_argument("--quorum-peers", default="")
    parser.add_argument("--initial-cluster-state", default="existing")
    args = parser.parse_args()
    mode, _, target = os.environ.get("FAKE_NODE_MODE", "").partition(":")
    mine = target in (args.node_id, "*")
    with open(args.db + ".args.json", "w") as fh:
        json.dump({"argv": sys.argv[1:], "secret": os.environ.get("AI_MEMORY_CLUSTER_SECRET")}, fh)
    if mode == "crash" and mine:
        print("cannot open database", flush=True)
        return 5
    if mode == "slow" and mine:
        print("opening database slowly", flush=True)
        time.sleep(float(os.environ.get("FAKE_NODE_DELAY", "3")))

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"status": "ok", "node_id": args.node_id}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *a: object) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Health)
    stop = threading.Event()
    if mode == "stubborn" and mine:
        signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"listening on {args.host}:{args.port}", flush=True)
    started = time.monotonic()
    while not stop.wait(0.05):
        if mode == "die" and mine and time.monotonic() - started > 0.5:
            print("fatal: disk full", flush=True)
            return 3
    print("stopped cleanly", flush=True)
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
