"""Replying from the web inbox, in a real browser (headless chromium through
Playwright, as test_web_browser.py): the page from node1 of a real
three-node cluster, the recipient's list and the thread filter read through
node3; the grant rules on a keys-mode daemon with the real replicated
directory (a user, her grants, a grant taken away while the composer is open)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import Cluster, http
from tests.daemon.procdaemon import daemon_process
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
    c = Cluster(tmp_path_factory.mktemp("webreply"))
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


def listed(cluster: Cluster, proj: str, **query: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"workspace": WS, "project": proj, "box": "inbox", **query})
    code, out = cluster.call("node3", "GET", f"/api/v1/messages?{q}")
    assert code == 200, out
    return list(out["messages"])


def composer(page: Any) -> Any:
    return page.get_by_role("region", name="Message", exact=True)


def reply_to(page: Any, mid: str, detail: Any = None) -> Any:
    """Reply on message mid (expanding its row unless detail is given)."""
    (detail or expand(page, mid)).get_by_role("button", name="Reply").click()
    box = composer(page)
    sync_api.expect(box).to_be_visible()
    return box


def test_a_reply_from_the_web_inbox_goes_to_the_sender_in_its_thread(
        cluster: Cluster, tab: Page) -> None:
    asker, doer = project(cluster, "r-asker", "kimi"), project(cluster, "r-doer")
    mid = send(cluster, asker, doer, "add paging to /v1/export", subject="paging",
               from_agent="kimi")
    other = send(cluster, asker, doer, "an unrelated note", subject="unrelated")

    page = open_project(tab, cluster, doer)
    box = reply_to(page, mid)
    sync_api.expect(box.get_by_label("From project")).to_have_value(f"{WS}/{doer}")
    sync_api.expect(box.get_by_label("To project")).to_have_value(f"{WS}/{asker}")
    sync_api.expect(box.get_by_label("To agent")).to_have_value("kimi")
    sync_api.expect(box.get_by_label("Subject")).to_have_value("Re: paging")
    sync_api.expect(box).to_contain_text(f"Reply to message {mid}")
    box.get_by_label("Message text").fill("which cursor format?")
    box.get_by_role("button", name="Send").click()
    sync_api.expect(box.get_by_role("alert")).to_contain_text(f"a reply in thread {mid}")
    sync_api.expect(box).not_to_contain_text("Reply to message")  # one reply per Reply

    [answer] = listed(cluster, asker)  # the recipient's list, through another node
    assert answer["in_reply_to"] == mid and answer["thread_id"] == mid, answer
    assert answer["subject"] == "Re: paging" and answer["to_agent"] == "kimi", answer
    assert answer["from_project_id"] == doer and answer["from_agent"] == "web", answer

    # The asker's page shows the thread and answers the answer: still mid's thread.
    page.locator(f'nav a[data-project="{WS}/{asker}"]').click()
    page.get_by_role("heading", name=f"{WS}/{asker} · Received").wait_for()
    detail = expand(page, answer["id"])
    prov = detail.get_by_label("Provenance")
    sync_api.expect(prov).to_contain_text(f"In reply to{mid}")
    sync_api.expect(prov).to_contain_text(f"Thread{mid}")
    box = reply_to(page, answer["id"], detail)
    sync_api.expect(box.get_by_label("To project")).to_have_value(f"{WS}/{doer}")
    sync_api.expect(box.get_by_label("To agent")).to_have_value("")  # "web" is no agent
    sync_api.expect(box.get_by_label("Subject")).to_have_value("Re: paging")
    box.get_by_label("Message text").fill("NDJSON, opaque cursors")
    box.get_by_role("button", name="Send").click()
    sync_api.expect(box.get_by_role("alert")).to_contain_text(f"a reply in thread {mid}")

    threaded = listed(cluster, doer, thread_id=mid)
    assert [m["id"] for m in threaded] == [mid, threaded[1]["id"]]
    assert threaded[1]["in_reply_to"] == answer["id"] and threaded[1]["thread_id"] == mid

    # Filtering the doer's list to the thread in the page.
    page.locator(f'nav a[data-project="{WS}/{doer}"]').click()
    page.get_by_role("heading", name=f"{WS}/{doer} · Received").wait_for()
    sync_api.expect(page.locator("#rows tr[data-id]")).to_have_count(3)
    expand(page, mid).get_by_role("button", name="Show thread").click()
    sync_api.expect(page.locator("#thread-banner")).to_contain_text(mid)
    sync_api.expect(page.locator("#rows tr[data-id]")).to_have_count(2)
    sync_api.expect(row(page, threaded[1]["id"])).to_be_visible()
    sync_api.expect(row(page, other)).to_have_count(0)
    page.get_by_role("button", name="Show all messages").click()
    sync_api.expect(page.locator("#rows tr[data-id]")).to_have_count(3)

    # Sent has no Reply (the sender is this project); Message is not a reply.
    page.get_by_role("tab", name="Sent").click()
    page.get_by_role("heading", name=f"{WS}/{doer} · Sent").wait_for()
    detail = expand(page, answer["id"])
    sync_api.expect(detail.get_by_role("button", name="Reply")).to_have_count(0)
    page.locator(f'nav li:has(a[data-project="{WS}/{asker}"])').get_by_role(
        "button", name="Message").click()
    sync_api.expect(composer(page)).not_to_contain_text("Reply to message")
    sync_api.expect(composer(page).get_by_label("Subject")).to_have_value("")


def test_a_reply_to_a_decision_question_is_a_decision_reply(cluster: Cluster, tab: Page) -> None:
    """The project-messaging convention: the answer's subject is exactly
    "decision-reply: <question id>", and the question stays pending."""
    asker, operator = project(cluster, "d-asker", "codex"), project(cluster, "d-operator")
    q = send(cluster, asker, operator, "question_id: x\noptions: accept, reject",
             subject="decision: Accept the known-flake exception?")
    page = open_project(tab, cluster, operator)
    box = reply_to(page, q)
    sync_api.expect(box.get_by_label("Subject")).to_have_value(f"decision-reply: {q}")
    box.get_by_label("Message text").fill("accept\nthe flake is written down")
    box.get_by_role("button", name="Send").click()
    sync_api.expect(box.get_by_role("alert")).to_contain_text("Sent")
    answers = [m for m in listed(cluster, asker) if m["subject"] == f"decision-reply: {q}"]
    assert len(answers) == 1 and answers[0]["body"].startswith("accept"), answers
    assert answers[0]["in_reply_to"] == q
    assert [m["id"] for m in listed(cluster, operator)] == [q]  # still pending, unclaimed


@pytest.fixture(scope="module")
def directory_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, str]]]:
    """A keys-mode daemon with the real replicated directory and a root key."""
    from daemon.identity.secrets import new_secret
    data = tmp_path_factory.mktemp("webreplykeys")
    root = new_secret()
    (data / "root.key").write_text(root + "\n")
    conf = data / "node.toml"
    conf.write_text(f'[auth]\nmode = "keys"\nbootstrap_root_key_file = "{data / "root.key"}"\n')
    with daemon_process(data, "--config", str(conf)) as proc:
        yield proc, {"Authorization": f"Bearer {root}"}


def test_a_reply_needs_write_on_the_senders_project(
        directory_daemon: tuple[Any, dict[str, str]], tab: Page) -> None:
    proc, root = directory_daemon

    def admin(method: str, path: str, body: Any = None) -> Any:
        code, out = http(method, proc.url + path, body, root)
        assert code in (200, 201), (path, out)
        return out

    for proj, harness in (("g-asker", "kimi"), ("g-doer", "codex")):
        admin("POST", "/api/v1/sessions", {"workspace": WS, "project": proj, "harness": harness})
    admin("POST", "/api/v1/admin/users", {"name": "rita", "password": "s3cret-pw"})
    admin("POST", "/api/v1/admin/grants",
          {"user": "rita", "workspace": WS, "project": "g-doer", "access": "write"})
    admin("POST", "/api/v1/admin/grants",
          {"user": "rita", "workspace": WS, "project": "g-asker", "access": "read"})
    mid = admin("POST", "/api/v1/messages", {
        "from_workspace": WS, "from_project": "g-asker", "to_workspace": WS,
        "to_project": "g-doer", "body": "please confirm", "subject": "confirm"})["message_id"]

    page = tab.page
    page.goto(f"{proc.url}/web/login")
    page.get_by_role("textbox", name="User name").fill("rita")
    page.get_by_role("textbox", name="Password").fill("s3cret-pw")
    page.get_by_role("button", name="Log in", exact=True).click()
    page.wait_for_url("**/web/inbox**")
    # Once the inbox has shown its first project, pick the recipient's the way
    # a person does. (Navigating while the page still starts races its own
    # choice of the first project.)
    page.get_by_role("heading", name="· Received").wait_for()
    page.locator(f'nav a[data-project="{WS}/g-doer"]').click()
    page.get_by_role("heading", name=f"{WS}/g-doer · Received").wait_for()
    detail = expand(page, mid)
    sync_api.expect(detail.get_by_role("button", name="Reply")).to_be_disabled()
    sync_api.expect(detail).to_contain_text("You may not send to the sender's project")

    # With write on the sender's project Reply works, until the grant goes:
    # the send then gets the server's refusal and nothing is sent.
    admin("POST", "/api/v1/admin/grants",
          {"user": "rita", "workspace": WS, "project": "g-asker", "access": "write"})
    page.reload()
    page.get_by_role("heading", name=f"{WS}/g-doer · Received").wait_for()
    box = reply_to(page, mid)
    sync_api.expect(box.get_by_label("Subject")).to_have_value("Re: confirm")
    box.get_by_label("Message text").fill("confirmed")
    q = urllib.parse.urlencode({"user": "rita", "workspace": WS, "project": "g-asker",
                                "access": "write"})
    assert admin("DELETE", f"/api/v1/admin/grants?{q}")["access"] == "read"
    box.get_by_role("button", name="Send").click()
    sync_api.expect(box.get_by_role("alert")).to_have_text(
        f"Not sent: message.send needs write on {WS}/g-asker")
    listing = admin("GET", f"/api/v1/messages?workspace={WS}&project=g-asker&box=inbox")
    assert listing["messages"] == []
