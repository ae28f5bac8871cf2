"""The listener's state file and its ordering of events, and what it does with a
stream's other events (against a scripted SSE server: no daemon needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cli.listen_state import ListenState, Order
from common.errors import Conflict

ROOT = Path(__file__).resolve().parents[2]


def test_the_cursor_moves_only_over_a_finished_prefix() -> None:
    order = Order()
    a, b, c = order.arrive("c1"), order.arrive("c2"), order.arrive("c3")
    assert order.finish(b) is None  # a still runs
    assert order.finish(a) == "c2"  # a and b are done: the cursor passes both
    assert order.finish(c) == "c3"
    d, e = order.arrive(None), order.arrive("c5")
    assert order.finish(d) is None and order.finish(e) == "c5"


def test_state_survives_a_reopen_and_drops_repeats(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    st = ListenState.open(path)
    one = st.arrive("inbox:bob", "v1.a")
    two = st.arrive("inbox:bob", "v1.b")
    st.finish("inbox:bob", two, "notify:n2")  # out of order: cursor stays
    rid = st.new_claim_id("m1")
    st.close()
    data = json.loads(path.read_text())
    assert "inbox:bob" not in data["cursors"] and data["handled"] == ["notify:n2"]
    again = ListenState.open(path)
    assert again.was_handled("notify:n2") and not again.was_handled("notify:n1")
    assert again.claim_ids("m1") == [rid]
    assert again.listener_id == st.listener_id
    del one
    entry = again.arrive("inbox:bob", "v1.a")
    again.finish("inbox:bob", entry, "notify:n1", claimed="m1")
    assert again.cursor("inbox:bob") == "v1.a" and again.claim_ids("m1") == []
    again.close()


def test_a_second_listener_may_not_share_the_file(tmp_path: Path) -> None:
    first = ListenState.open(tmp_path / "s.json")
    with pytest.raises(Conflict):
        ListenState.open(tmp_path / "s.json")
    first.close()
    ListenState.open(tmp_path / "s.json").close()


def test_another_kind_of_event_on_the_stream_moves_no_cursor(tmp_path: Path) -> None:
    """A stream event of a kind the listener does not handle (here one shaped
    like upstream's ``agent_notified``, sent before our ``notify`` with an id
    that covers it) is passed over, id and all: the stream drops before the
    ``notify`` is read, and the listener resumes before it, not past it."""
    seen_ids: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen_ids.append(self.headers.get("Last-Event-ID"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            note = {"agent_id": "bob", "notification": {"id": "n1", "from": "alice",
                                                         "title": "hi"}}
            body = "retry: 100\n\n"
            if len(seen_ids) == 1:  # the connection drops before our event is read
                body += ("event: ready\nid: c0\ndata: {}\n\n"
                         "event: agent_notified\nid: c-upstream\ndata: {\"inbox_row_id\": 1}\n\n")
            elif seen_ids[-1] == "c0":  # resumed before it: replayed
                body += (f"event: notify\nid: c1\ndata: {json.dumps(note)}\n\n"
                         "event: ready\nid: c1\ndata: {}\n\n")
            else:  # resumed past it: lost
                body += "event: ready\nid: c-upstream\ndata: {}\n\n"
            self.wfile.write(body.encode())
            self.wfile.flush()
            if len(seen_ids) > 1:
                time.sleep(5)

        def log_message(self, format: str, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    state = tmp_path / "s.json"
    printed = tmp_path / "out.jsonl"
    with printed.open("wb") as out_fh:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "--agent-id", "bob", "listen",
                                 "--url", url, "--json", "--state", str(state)], cwd=ROOT,
                                stdout=out_fh, stderr=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        # Stop once the listener has printed the notify (the second request
        # alone is not enough: it may not have read the replayed event yet),
        # or once it resumed from anywhere but c0 (the bug this test is for).
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if printed.read_bytes().endswith(b"\n"):
                break
            if len(seen_ids) >= 2 and seen_ids[1] != "c0":
                break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        server.shutdown()
        server.server_close()
    assert seen_ids[:2] == [None, "c0"], err
    lines = printed.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["n1"]
    assert json.loads(state.read_text())["cursors"] == {"inbox:bob": "c1"}
