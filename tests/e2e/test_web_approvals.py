"""The approval queue in a real browser (Debian's chromium, headless, through
Playwright) against three real processes whose admission hook holds every
send to project B: the web inbox shows such mail as "awaiting approval",
and its Approve and Reject buttons decide it. Writes only to pytest's temp
directories."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import Cluster
from tests.cluster.test_approvals import (
    held_cluster,  # noqa: F401 (a fixture)
    send,
)
from tests.cluster.test_claims import B, setup_projects

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("chromium is not installed (make deps installs it from Debian)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture
def page() -> Iterator[Any]:
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                 args=["--no-sandbox", "--disable-gpu",
                                       "--disable-dev-shm-usage"])
    try:
        ctx = browser.new_context(viewport={"width": 1280, "height": 860})
        p = ctx.new_page()
        p.set_default_timeout(10_000)
        yield p
    finally:
        browser.close()
        pw.stop()


def pop(c: Cluster, node: str = "node3") -> Any:
    code, out = c.call(node, "POST", "/api/v1/messages/pop",
                       {**B, "request_id": f"pop-{uuid.uuid4().hex}"})
    assert code == 200, out
    return out["message"]


def expand(page: Any, mid: str) -> Any:
    page.locator(f'tr[data-id="{mid}"]').get_by_role("button").click()
    detail = page.locator(f"#detail-{mid}")
    detail.wait_for()
    return detail


def test_the_web_inbox_shows_awaiting_approval_and_decides(
        held_cluster: Cluster, page: Any) -> None:  # noqa: F811 (the fixture)
    c = held_cluster
    setup_projects(c)
    first = send(c, "node2", "web-approve-me")
    second = send(c, "node2", "web-reject-me")
    page.goto(f"{c.url('node1')}/web/inbox#{B['workspace']}/{B['project']}")
    page.get_by_role("heading", name=f"{B['workspace']}/{B['project']} · Received").wait_for()
    row = page.locator(f'tr[data-id="{first}"]')
    sync_api.expect(row.get_by_text("awaiting approval")).to_be_visible()
    banner = page.locator("#approval-banner")
    sync_api.expect(banner).to_contain_text("2 messages await approval")
    detail = expand(page, first)
    sync_api.expect(detail.get_by_label("Provenance")).to_contain_text("release manager")
    assert pop(c) is None  # held: nothing to collect

    approval = detail.get_by_role("group", name="Approval")
    approval.get_by_label("Reason (optional)").fill("checked with the owner")
    approval.get_by_role("button", name="Approve").click()
    sync_api.expect(row.get_by_text("queued")).to_be_visible()
    sync_api.expect(banner).to_contain_text("1 message awaits approval")
    got = pop(c)
    assert got["id"] == first

    detail = expand(page, second)
    detail.get_by_role("group", name="Approval").get_by_role("button", name="Reject").click()
    sync_api.expect(page.locator(f'tr[data-id="{second}"]').get_by_text("rejected")).to_be_visible()
    assert pop(c) is None  # a rejected message is never collected
    sync_api.expect(banner).to_be_hidden()
    detail = page.locator(f"#detail-{second}")  # still open after the refresh
    sync_api.expect(detail.get_by_label("Provenance")).to_contain_text("rejected by")
    sync_api.expect(detail.get_by_role("group", name="Approval")).to_have_count(0)
