"""The web inbox shows how a request ended and filters by thread, in a real
browser (headless chromium through Playwright, as test_web_browser.py),
against three real processes: the claim and completion through node3, the
reply through node2, the page from node1."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import Cluster
from tests.e2e.test_web_browser import (
    CHROMIUM,
    WS,
    Page,
    expand,
    open_project,
    project,
    row,
    send,
    sync_api,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
assert Path(CHROMIUM).exists()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("webdone"))
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


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


def test_the_outcome_and_the_thread_in_the_web_inbox(cluster: Cluster, tab: Page) -> None:
    src, dst = project(cluster, "asker", "kimi"), project(cluster, "doer")
    mid = send(cluster, src, dst, "add paging to /v1/export", subject="paging")
    send(cluster, dst, src, "an unrelated note", subject="unrelated")
    worker = {"X-Agent-Id": "worker"}
    code, out = cluster.call("node3", "POST", "/api/v1/messages/pop", {
        "workspace": WS, "project": dst, "message_id": mid,
        "request_id": f"pop-{uuid.uuid4().hex}"}, headers=worker)
    assert code == 200 and out["message"]["id"] == mid, out
    code, out = cluster.call("node3", "POST", "/api/v1/messages/complete", {
        "message_id": mid, "result": "blocked", "note": "needs the cursor format first"},
        headers=worker)
    assert code == 200, out
    code, reply = cluster.call("node2", "POST", "/api/v1/messages/reply",
                               {"message_id": mid, "body": "which cursor format?"})
    assert code == 201, reply

    page = open_project(tab, cluster, src)
    sync_api.expect(page.locator("#rows tr")).to_have_count(2)
    detail = expand(page, reply["message_id"])
    prov = detail.get_by_label("Provenance")
    sync_api.expect(prov).to_contain_text("In reply to")
    sync_api.expect(prov).to_contain_text(mid)
    detail.get_by_role("button", name="Show thread").click()
    sync_api.expect(page.locator("#thread-banner")).to_contain_text(mid)
    sync_api.expect(page.locator("#rows tr[data-id]")).to_have_count(1)
    sync_api.expect(row(page, reply["message_id"])).to_be_visible()
    page.get_by_role("button", name="Show all messages").click()
    sync_api.expect(page.locator("#rows tr[data-id]")).to_have_count(2)

    page.get_by_role("tab", name="Sent").click()
    page.get_by_role("heading", name=f"{WS}/{src} · Sent").wait_for()
    sync_api.expect(row(page, mid).get_by_text("collected → blocked")).to_be_visible()
    detail = expand(page, mid)
    prov = detail.get_by_label("Provenance")
    sync_api.expect(prov).to_contain_text("Outcome")
    sync_api.expect(prov).to_contain_text("needs the cursor format first")
    sync_api.expect(detail).not_to_contain_text("is not confirmed")  # it is, now
