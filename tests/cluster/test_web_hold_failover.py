"""A web inbox hold across real processes: it survives kill -9 of the
mailbox's owner (the next owner still keeps the message out of the queue,
so pops get the next one), and the editor's save after the failover puts
the message back at its place with its id."""

from __future__ import annotations

import http.cookiejar
import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from tests.cluster.harness import Cluster
from tests.cluster.test_claims import A, B, owner_order, setup_projects

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


class Browser:
    """Just enough of a browser: a cookie jar, the UI header, Origin, CSRF."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.csrf = ""

    def open(self) -> None:
        with self.opener.open(self.base + "/web/inbox", timeout=10) as r:
            assert r.status == 200
        with self.opener.open(self.base + "/web/api/me", timeout=10) as r:
            self.csrf = json.loads(r.read())["csrf_token"]

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     method="POST", headers={
                                         "Content-Type": "application/json",
                                         "X-AI-Memory-UI": "1", "Origin": self.base,
                                         "X-CSRF-Token": self.csrf})
        try:
            with self.opener.open(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")


def until_ok(fn: Any, deadline_s: float = 20.0) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        try:
            code, body = fn()
        except OSError:
            code, body = 0, {}
        if code in (200, 201):
            return body
        assert code in (0, 503), body
        assert time.monotonic() < end, f"kept failing: {code} {body}"
        time.sleep(0.2)


def test_a_hold_survives_the_owners_kill_and_the_save_lands_after_failover(
        cluster: Cluster) -> None:
    setup_projects(cluster)
    owner, second, third = owner_order(cluster, B)
    ids = []
    for i in range(2):
        code, body = cluster.call(second, "POST", "/api/v1/messages", {
            "from_workspace": A["workspace"], "from_project": A["project"],
            "to_workspace": B["workspace"], "to_project": B["project"], "body": f"m{i}"})
        assert code == 201, body
        ids.append(body["message_id"])
    web = Browser(cluster.url(second))
    web.open()
    code, held = web.post(f"/web/api/messages/{ids[0]}/edit", {})
    assert code == 200 and held["message"]["state"] == "editing", held

    cluster.kill9(owner)

    def pop() -> tuple[int, Any]:
        return cluster.call(third, "POST", "/api/v1/messages/pop",
                            {**B, "request_id": str(uuid.uuid4())}, timeout=5)
    got = until_ok(pop)
    assert got["message"]["id"] == ids[1]  # the held one stays out of the queue
    assert until_ok(pop)["message"] is None

    saved = until_ok(lambda: web.post(f"/web/api/messages/{ids[0]}/save",
                                      {"subject": "after failover", "body": "edited"}))
    assert saved["message"]["id"] == ids[0] and saved["message"]["state"] == "pending"
    cluster.restart(owner)
    got = until_ok(pop)
    assert got["message"]["id"] == ids[0] and "edited" in got["message"]["body"]
