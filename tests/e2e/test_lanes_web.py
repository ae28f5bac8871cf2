"""The web inbox and webhooks on a node with lanes (``ai-memory serve --lanes 2``):
one real daemon (a supervisor and two lane processes), Debian's chromium
through Playwright (as test_web_browser.py), a webhook receiver on loopback.

The browser logs in, reads, sends, replies and logs out through the node's
port (where the kernel spreads connections over the lanes) and through
each lane's own port, so both lanes serve its requests and hand some on
(``lane_handoffs_total`` of each lane); a session made on one lane is known
on the other, and a logout ends it on both at once. A webhook subscription
made once is on both lanes (one id, one secret) and receives each event
exactly once, HMAC-signed, whichever lane makes it (memories: lane 0;
notifications and mail: the recipient's lane); deleting it stops both."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from common.lanes import lane_of
from common.ops import inbox_key, mailbox_key
from tests.cluster.harness import http
from tests.daemon.procdaemon import Proc, daemon_process
from tests.e2e.test_web_browser import CHROMIUM, WS, Page, expand, row, sync_api

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
assert Path(CHROMIUM).exists()

KEY = "aim_lanes_web_key"
AUTH = {"X-API-Key": KEY}
LANE_OFFSET = 100


def named_on(lane: int, prefix: str, key: Callable[[str], str]) -> str:
    """The first name ``<prefix>-<n>`` whose key is on ``lane`` of 2."""
    return next(f"{prefix}-{n}" for n in range(1000) if lane_of(key(f"{prefix}-{n}"), 2) == lane)


def project_on(lane: int, prefix: str) -> str:
    return named_on(lane, prefix, lambda p: mailbox_key(WS, p))


def agent_on(lane: int, prefix: str) -> str:
    return named_on(lane, prefix, inbox_key)


def until(check: Callable[[], Any], what: str, within: float = 20.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Node:
    def __init__(self, proc: Proc) -> None:
        self.proc = proc

    @property
    def url(self) -> str:
        return self.proc.url

    def lane_url(self, lane: int) -> str:
        return f"http://127.0.0.1:{self.proc.port + LANE_OFFSET * (lane + 1)}"

    def call(self, method: str, path: str, body: Any = None, *, lane: int | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        base = self.url if lane is None else self.lane_url(lane)
        return http(method, base + path, body, {**AUTH, **(headers or {})})

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        code, out = self.call(method, path, body, **kw)
        assert code in (200, 201), (method, path, code, out)
        return out

    def up(self, lane: int) -> bool:
        try:
            return self.call("GET", "/api/v1/health", lane=lane)[0] == 200
        except OSError:
            return False

    def handoffs(self, lane: int) -> float:
        code, text = self.call("GET", "/metrics", lane=lane)
        assert code == 200, text
        found = re.findall(r"^\S*lane_handoffs_total(?:\{[^}]*\})? (\S+)$", text, re.M)
        return sum(float(v) for v in found)

    def project(self, name: str, harness: str = "claude-code") -> str:
        self.ok("POST", "/api/v1/sessions", {"workspace": WS, "project": name, "harness": harness})
        return name

    def send(self, frm: str, to: str, body: str, **extra: Any) -> str:
        return str(self.ok("POST", "/api/v1/messages", {
            "from_workspace": WS, "from_project": frm, "to_workspace": WS, "to_project": to,
            "body": body, **extra})["message_id"])

    def inbox(self, proj: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"workspace": WS, "project": proj, "box": "inbox"})
        # On the mailbox's lane's own port (GET /api/v1/messages is not under test here).
        lane = lane_of(mailbox_key(WS, proj), 2)
        return list(self.ok("GET", f"/api/v1/messages?{q}", lane=lane)["messages"])


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    data = tmp_path_factory.mktemp("laneweb")
    conf = data / "node.toml"
    conf.write_text(f'[auth]\nmode = "keys"\napi_keys = {{ "{KEY}" = "alice" }}\n'
                    "[webhooks]\nallow_loopback_webhooks = true\n")
    with daemon_process(data, "--config", str(conf), "--lanes", "2") as proc:
        n = Node(proc)
        for lane in (0, 1):  # both lanes up, on their own ports
            until(lambda lane=lane: n.up(lane), f"lane {lane}")
        try:
            yield n
        except Exception:
            print(proc.log_text()[-5000:])
            raise


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    pw = sync_api.sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                           args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
    try:
        yield b
    finally:
        b.close()
        pw.stop()


@pytest.fixture
def tab(browser: Any) -> Iterator[Page]:
    p = Page(browser)
    try:
        yield p
    finally:
        p.close()


def show(page: Any, base: str, proj: str) -> None:
    # A fresh load with the fragment: a fragment-only navigation keeps the
    # running page, whose own start may still write its first project's
    # fragment over this one (seen about once in five runs).
    page.goto("about:blank")
    page.goto(f"{base}/web/inbox#{WS}/{proj}")
    page.get_by_role("heading", name=f"{WS}/{proj} · Received").wait_for()


def session_cookie(tab: Page) -> dict[str, str]:
    found = [c for c in tab.ctx.cookies() if c["name"].startswith("aim_web_")]
    assert len(found) == 1, found
    return {"Cookie": f"{found[0]['name']}={found[0]['value']}"}


def test_the_web_inbox_works_across_both_lanes(node: Node, tab: Page) -> None:
    doer = node.project(project_on(0, "w-doer"), "kimi")
    asker = node.project(project_on(1, "w-asker"), "codex")
    mid = node.send(asker, doer, "add paging to /v1/export", subject="paging")
    before = [node.handoffs(0), node.handoffs(1)]

    page = tab.page
    page.goto(f"{node.url}/web/inbox")
    page.wait_for_url("**/web/login")
    page.get_by_role("textbox", name="API key").fill(KEY)
    page.get_by_role("button", name="Log in with key").click()
    page.wait_for_url("**/web/inbox")
    cookie = session_cookie(tab)
    for lane in (0, 1):  # the one login is known on each lane
        code, me = http("GET", node.lane_url(lane) + "/web/api/me", None, cookie)
        assert code == 200 and me["login"] == "key", (lane, me)

    # Read and reply through the node's port: the message is in the doer's
    # mailbox (lane 0), the reply goes to the asker's (lane 1).
    show(page, node.url, doer)
    detail = expand(page, mid)
    detail.get_by_role("button", name="Reply").click()
    box = page.get_by_role("region", name="Message", exact=True)
    sync_api.expect(box.get_by_label("To project")).to_have_value(f"{WS}/{asker}")
    box.get_by_label("Message text").fill("which cursor format?")
    box.get_by_role("button", name="Send").click()
    sync_api.expect(box.get_by_role("alert")).to_contain_text(f"a reply in thread {mid}")
    [answer] = node.inbox(asker)
    assert answer["in_reply_to"] == mid and answer["from_project_id"] == doer, answer

    # Through lane 1's own port: the asker reads the reply, sends a new
    # message to the doer (lane 0), and sees both in its Sent box (both
    # lanes' mail); the doer's page shows the new one.
    show(page, node.lane_url(1), asker)
    sync_api.expect(row(page, answer["id"])).to_be_visible()
    page.locator(f'nav li:has(a[data-project="{WS}/{asker}"])').get_by_role(
        "button", name="Message").click()
    box = page.get_by_role("region", name="Message", exact=True)
    box.get_by_label("To project").select_option(f"{WS}/{doer}")
    box.get_by_label("Subject").fill("second question")
    box.get_by_label("Message text").fill("and the page size?")
    box.get_by_role("button", name="Send").click()
    sync_api.expect(box.get_by_role("alert")).to_contain_text("Sent")
    page.get_by_role("tab", name="Sent").click()
    page.get_by_role("heading", name=f"{WS}/{asker} · Sent").wait_for()
    sync_api.expect(page.locator("#rows tr")).to_have_count(2)  # mid (lane 0) and the new one
    assert row(page, mid).count() == 1
    [_, second] = node.inbox(doer)
    assert second["subject"] == "second question", second
    show(page, node.lane_url(1), doer)
    sync_api.expect(row(page, second["id"])).to_be_visible()

    # Through lane 0's own port: the asker's mailbox (lane 1), then the logout.
    show(page, node.lane_url(0), asker)
    sync_api.expect(row(page, answer["id"])).to_be_visible()
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/web/login")
    for lane in (0, 1):  # ended on every lane at once
        code, _ = http("GET", node.lane_url(lane) + "/web/api/me", None, cookie)
        assert code == 401, lane
    page.goto(f"{node.url}/web/inbox")
    page.wait_for_url("**/web/login")

    after = [node.handoffs(0), node.handoffs(1)]
    assert after[0] > before[0] and after[1] > before[1], (before, after)


# -- webhooks ------------------------------------------------------------------------------

class Receiver:
    """A webhook receiver on loopback: every POST recorded, answered 200."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    outer.calls.append((self.path, dict(self.headers.items()), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def events(self, path: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
        with self.lock:
            return [(h, json.loads(b)) for p, h, b in self.calls if p == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def signed(headers: dict[str, str], body: dict[str, Any], raw: bytes, secret: str) -> bool:
    stamp = headers["X-AI-Memory-Timestamp"]
    want = hmac.new(secret.encode(), stamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-AI-Memory-Signature"], f"sha256={want}")


def test_a_webhook_subscription_serves_both_lanes_once(node: Node, receiver: Receiver) -> None:
    sender = node.project(project_on(0, "h-from"))
    box = node.project(project_on(1, "h-box"))
    reader = agent_on(1, "h-agent")
    sub = node.ok("POST", "/api/v1/subscriptions", {"url": receiver.url("/hook")}, lane=0)
    for lane in (0, 1):  # one row, the same id, on both lanes
        subs = node.ok("GET", "/api/v1/subscriptions", lane=lane)["subscriptions"]
        assert [s["id"] for s in subs] == [sub["id"]], (lane, subs)

    mem = node.ok("POST", "/api/v1/memories", {"title": "lanes", "content": "lane 0 keeps it",
                                               "namespace": "lanes-hooks"}, lane=1)
    note = node.ok("POST", "/api/v1/notify", {"target_agent_id": reader, "title": "hello",
                                              "payload": "for lane 1"}, lane=0)
    node.send(sender, box, "mail for lane 1")
    mem_id = mem["id"]
    note_id = note["id"]

    def got() -> dict[str, int]:
        seen = {"mem": 0, "note": 0, "mail": 0}
        for _, e in receiver.events("/hook"):
            seen["mem"] += e.get("memory_id") == mem_id
            seen["note"] += e.get("id") == note_id
            seen["mail"] += e["event"] == "message_send" and e.get("to_project") == box
        return seen

    until(lambda: all(got().values()), "the three events")
    # Later events of both lanes arrive after any repeat of the earlier ones would have.
    node.send(sender, sender, "marker lane 0")
    node.ok("POST", "/api/v1/notify", {"target_agent_id": reader, "title": "marker"})
    until(lambda: sum(e["event"] == "message_send" and e.get("to_project") == sender
                      for _, e in receiver.events("/hook")) == 1, "the lane-0 marker")
    until(lambda: sum(e["event"] == "notify" and e.get("id") != note_id
                      for _, e in receiver.events("/hook")) == 1, "the lane-1 marker")
    assert got() == {"mem": 1, "note": 1, "mail": 1}, receiver.events("/hook")
    with receiver.lock:
        raw = [(h, b) for p, h, b in receiver.calls if p == "/hook"]
    assert raw and all(signed(h, json.loads(b), b, sub["secret"]) for h, b in raw)
    deliveries = [h["X-AI-Memory-Delivery"] for h, _ in raw]
    assert len(set(deliveries)) == len(deliveries)

    # Deleted through lane 1: gone from both lanes, and neither delivers to it.
    gone = node.ok("DELETE", f"/api/v1/subscriptions/{sub['id']}", lane=1)
    assert gone["deleted"] is True
    for lane in (0, 1):
        assert node.ok("GET", "/api/v1/subscriptions", lane=lane)["subscriptions"] == []
    count = len(receiver.events("/hook"))
    control = node.ok("POST", "/api/v1/subscriptions", {"url": receiver.url("/control")})
    node.send(sender, box, "after the delete, lane 1")
    node.ok("POST", "/api/v1/memories", {"title": "after", "content": "lane 0",
                                         "namespace": "lanes-hooks"})
    until(lambda: {e.get("event") for _, e in receiver.events("/control")}
          >= {"message_send", "memory_store"}, "the control subscription's events")
    assert len(receiver.events("/hook")) == count
    node.ok("DELETE", f"/api/v1/subscriptions/{control['id']}")
