"""The web inbox in a real browser: Debian's chromium, headless, driven by
Playwright for Python, against a real three-node cluster on loopback (pages
from one node, agents and checks through the others).

Installed by the project's own files: ``playwright`` comes with the test
extra, ``chromium`` from Debian through ``make deps`` (the browser is never
downloaded by Playwright). Without chromium the module is skipped and says so.
The run takes screenshots of the inbox and the composer, into a temporary
folder; ``make screenshots`` names docs/img/ instead (AI_MEMORY_SCREENSHOTS),
which is how the images in docs/web.md are made.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import Cluster
from tests.daemon.procdaemon import daemon_process

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("chromium is not installed (make deps installs it from Debian)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")

XSS = "<script>alert(1)</script><img src=x onerror=alert(1)>"
WS = "default"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("webcluster"))
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: a temporary folder, or the one named by
    AI_MEMORY_SCREENSHOTS (``make screenshots``: docs/img)."""
    named = os.environ.get("AI_MEMORY_SCREENSHOTS")
    path = Path(named) if named else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


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


class Page:
    """One browser tab in its own context (its own cookies), recording dialogs."""

    def __init__(self, browser: Any) -> None:
        self.ctx = browser.new_context(viewport={"width": 1280, "height": 860})
        self.page = self.ctx.new_page()
        self.page.set_default_timeout(10_000)
        self.dialogs: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def close(self) -> None:
        self.ctx.close()


@pytest.fixture
def tab(browser: Any) -> Iterator[Page]:
    p = Page(browser)
    try:
        yield p
    finally:
        p.close()


def project(cluster: Cluster, name: str, harness: str = "claude-code", node: str = "node2") -> str:
    code, body = cluster.call(node, "POST", "/api/v1/sessions",
                              {"workspace": WS, "project": name, "harness": harness})
    assert code == 201, body
    return name


def send(cluster: Cluster, frm: str, to: str, body: str, node: str = "node2",
         **extra: Any) -> str:
    code, out = cluster.call(node, "POST", "/api/v1/messages", {
        "from_workspace": WS, "from_project": frm, "to_workspace": WS, "to_project": to,
        "body": body, **extra})
    assert code == 201, out
    return str(out["message_id"])


def inbox_ids(cluster: Cluster, proj: str, node: str = "node3") -> list[str]:
    code, out = cluster.call(node, "GET", f"/api/v1/messages?workspace={WS}&project={proj}"
                                          "&box=inbox&limit=200")
    assert code == 200, out
    return [m["id"] for m in out["messages"]]


def pop(cluster: Cluster, proj: str, node: str = "node3") -> Any:
    code, out = cluster.call(node, "POST", "/api/v1/messages/pop",
                             {"workspace": WS, "project": proj,
                              "request_id": f"pop-{uuid.uuid4().hex}"})
    assert code == 200, out
    return out["message"]


def open_project(tab: Page, cluster: Cluster, proj: str, node: str = "node1") -> Any:
    page = tab.page
    page.goto(f"{cluster.url(node)}/web/inbox#{WS}/{proj}")
    page.get_by_role("heading", name=f"{WS}/{proj} · Received").wait_for()
    return page


def row(page: Any, mid: str) -> Any:
    return page.locator(f'tr[data-id="{mid}"]')


def expand(page: Any, mid: str) -> Any:
    row(page, mid).get_by_role("button").click()
    detail = page.locator(f"#detail-{mid}")
    detail.wait_for()
    return detail


# -- the tests ------------------------------------------------------------------------


def test_anonymous_inbox_pages_past_50_and_expands_a_row(cluster: Cluster, tab: Page,
                                                         shots: Path) -> None:
    src, dst = project(cluster, "alpha", "kimi"), project(cluster, "beta")
    ids = [send(cluster, src, dst, f"request number {i}", subject=f"task {i}", from_agent="kimi",
                node=("node2", "node3")[i % 2]) for i in range(55)]
    page = open_project(tab, cluster, dst)
    sync_api.expect(page.get_by_text("Anonymous mode", exact=True)).to_be_visible()
    sync_api.expect(page.locator("#rows tr")).to_have_count(50)
    assert page.locator("#rows tr").first.get_attribute("data-id") == ids[-1]  # newest first
    sync_api.expect(page.get_by_role("button", name="Previous")).to_be_disabled()
    sync_api.expect(row(page, ids[0])).to_have_count(0)
    page.get_by_role("button", name="Next").click()
    sync_api.expect(page.locator("#rows tr")).to_have_count(5)
    sync_api.expect(row(page, ids[0])).to_be_visible()
    sync_api.expect(page.get_by_role("button", name="Next")).to_be_disabled()
    page.get_by_role("button", name="Previous").click()
    sync_api.expect(page.locator("#rows tr")).to_have_count(50)
    detail = expand(page, ids[-1])
    sync_api.expect(detail.get_by_label("Message text")).to_have_text("request number 54")
    prov = detail.get_by_label("Provenance")
    sync_api.expect(prov).to_contain_text("alpha")
    sync_api.expect(prov).to_contain_text("kimi")
    sync_api.expect(prov).to_contain_text("task 54")
    sync_api.expect(prov).to_contain_text("unknown")  # the nature
    sync_api.expect(row(page, ids[-1]).get_by_text("queued")).to_be_visible()
    assert len(inbox_ids(cluster, dst)) == 55  # reading claimed nothing
    # Collected and cancelled states show under their words.
    popped = pop(cluster, dst)
    cluster.call("node2", "POST", "/api/v1/messages/cancel",
                 {"workspace": WS, "project": src, "message_id": ids[1]})
    page.reload()
    page.get_by_role("heading", name=f"{WS}/{dst} · Received").wait_for()
    page.get_by_role("button", name="Next").click()
    sync_api.expect(row(page, popped["id"]).get_by_text("collected")).to_be_visible()
    sync_api.expect(row(page, ids[1]).get_by_text("cancelled")).to_be_visible()
    page.get_by_role("tab", name="Sent").click()
    page.get_by_role("heading", name=f"{WS}/{dst} · Sent").wait_for()
    page.locator("nav").get_by_role("link", name=src).click()
    page.get_by_role("tab", name="Sent").click()
    page.get_by_role("heading", name=f"{WS}/{src} · Sent").wait_for()
    sync_api.expect(page.locator("#rows tr")).to_have_count(50)
    page.get_by_role("tab", name="Received").click()
    page.locator("nav").get_by_role("link", name=dst).click()
    page.get_by_role("heading", name=f"{WS}/{dst} · Received").wait_for()
    expand(page, ids[-1])
    page.screenshot(path=str(shots / "inbox.png"))


def test_compose_and_send(cluster: Cluster, tab: Page, shots: Path) -> None:
    src, dst = project(cluster, "gamma", "kimi"), project(cluster, "delta", "codex")
    page = open_project(tab, cluster, src)
    page.locator(f'nav li:has(a[data-project="{WS}/{src}"])').get_by_role(
        "button", name="Message").click()
    composer = page.get_by_role("region", name="Message")
    sync_api.expect(composer.get_by_label("From project")).to_have_value(f"{WS}/{src}")
    sync_api.expect(composer.get_by_label("To project")).to_have_value(f"{WS}/{src}")
    sync_api.expect(composer.get_by_label("To agent").locator("option")).to_contain_text(
        ["Any of them (shared mail)", "kimi"])
    composer.get_by_label("To project").select_option(f"{WS}/{dst}")
    sync_api.expect(composer.get_by_label("To agent").locator("option")).to_contain_text(
        ["Any of them (shared mail)", "codex"])
    # Changing From resets To to it (and the agent list with it).
    composer.get_by_label("From project").select_option(f"{WS}/{dst}")
    sync_api.expect(composer.get_by_label("To project")).to_have_value(f"{WS}/{dst}")
    composer.get_by_label("From project").select_option(f"{WS}/{src}")
    composer.get_by_label("To project").select_option(f"{WS}/{dst}")
    sync_api.expect(composer.get_by_label("To agent").locator("option")).to_contain_text(
        ["Any of them (shared mail)", "codex"])
    composer.get_by_label("To agent").select_option("codex")
    composer.get_by_label("Subject").fill("please review the export")
    composer.get_by_label("Message text").fill("the /v1/export endpoint needs paging")
    page.screenshot(path=str(shots / "composer.png"))
    composer.get_by_role("button", name="Send").click()
    sync_api.expect(composer.get_by_role("alert")).to_contain_text("Sent")
    got = pop(cluster, dst)  # through another node; shared pops skip codex's mail
    assert got is None
    code, out = cluster.call("node3", "POST", "/api/v1/messages/pop",
                             {"workspace": WS, "project": dst, "agent": "codex"})
    assert code == 200 and out["message"]["subject"] == "please review the export"
    assert out["provenance"]["from_project"] == src and out["message"]["to_agent"] == "codex"


def test_a_collected_row_says_collection_is_not_completion(cluster: Cluster, tab: Page) -> None:
    """PM-65: "collected" is the agent's claim, and the page says the request
    is not known to be done."""
    src, dst = project(cluster, "coll-a", "kimi"), project(cluster, "coll-b", "codex")
    mid = send(cluster, src, dst, "run the migration")
    pending = send(cluster, src, dst, "still waiting")
    assert pop(cluster, dst)["id"] == mid
    page = open_project(tab, cluster, dst)
    sync_api.expect(row(page, mid).get_by_text("collected")).to_be_visible()
    detail = expand(page, mid)
    sync_api.expect(detail).to_contain_text(
        "Collected records the agent's claim; completion of the request is not confirmed.")
    other = expand(page, pending)  # a queued row says nothing of the kind
    sync_api.expect(other).not_to_contain_text("completion of the request")


def test_changing_either_project_clears_the_chosen_agent(cluster: Cluster, tab: Page) -> None:
    """PM-69: every project here has a codex session, so the agent could be
    kept; changing To, or From (which resets To), clears it all the same.
    PM-77: an ordinary (not legacy) session shows no write-token field."""
    src = project(cluster, "clear-a", "codex")
    one, two = project(cluster, "clear-b", "codex"), project(cluster, "clear-c", "codex")
    page = open_project(tab, cluster, src)
    page.locator(f'nav li:has(a[data-project="{WS}/{src}"])').get_by_role(
        "button", name="Message").click()
    composer = page.get_by_role("region", name="Message", exact=True)
    sync_api.expect(composer).to_be_visible()
    token = page.locator("#write-token")
    sync_api.expect(token).to_have_count(1)
    sync_api.expect(token).to_be_hidden()
    sync_api.expect(composer.get_by_text("Write token")).to_be_hidden()
    agent = composer.get_by_label("To agent")
    composer.get_by_label("To project").select_option(f"{WS}/{one}")
    sync_api.expect(agent.locator("option")).to_contain_text(["Any of them", "codex"])
    agent.select_option("codex")
    sync_api.expect(agent).to_have_value("codex")
    composer.get_by_label("To project").select_option(f"{WS}/{two}")
    sync_api.expect(agent.locator("option")).to_contain_text(["Any of them", "codex"])
    sync_api.expect(agent).to_have_value("")
    agent.select_option("codex")
    composer.get_by_label("From project").select_option(f"{WS}/{one}")
    sync_api.expect(composer.get_by_label("To project")).to_have_value(f"{WS}/{one}")
    sync_api.expect(agent.locator("option")).to_contain_text(["Any of them", "codex"])
    sync_api.expect(agent).to_have_value("")
    # Sent now, it is shared mail: any session may pop it.
    composer.get_by_label("Message text").fill("for whoever is there")
    composer.get_by_role("button", name="Send").click()
    sync_api.expect(composer.get_by_role("alert")).to_contain_text("Sent")
    got = pop(cluster, one)
    assert got["to_agent"] is None and "for whoever is there" in got["body"]


def test_a_destination_with_no_agent_disables_send_and_says_how_to_register(
        cluster: Cluster, tab: Page) -> None:
    """PM-70: the page was loaded while the destination had an agent; the
    project is purged meanwhile (its sessions with it), so nobody is
    registered there when the composer asks: Send is disabled, with the way
    to register one. Once an agent starts a session there, Send comes back."""
    src, dst = project(cluster, "none-a", "kimi"), project(cluster, "none-b", "codex")
    page = open_project(tab, cluster, src)
    code, out = cluster.call("node2", "POST", f"/api/v1/projects/{WS}/{dst}/purge",
                             {"reason": "browser test: a project with no agent"})
    assert code == 200, out
    page.locator(f'nav li:has(a[data-project="{WS}/{src}"])').get_by_role(
        "button", name="Message").click()
    composer = page.get_by_role("region", name="Message", exact=True)
    sync_api.expect(composer.get_by_role("button", name="Send")).to_be_enabled()  # to src: kimi
    composer.get_by_label("To project").select_option(f"{WS}/{dst}")
    note = page.locator("#no-agent")
    sync_api.expect(note).to_be_visible()
    sync_api.expect(note).to_contain_text(f"No agent has a session in {WS}/{dst}")
    sync_api.expect(note).to_contain_text("Register one by starting an agent session there")
    sync_api.expect(composer.get_by_role("button", name="Send")).to_be_disabled()
    sync_api.expect(composer.get_by_label("To agent")).to_be_disabled()
    # An agent registers; choosing the project again finds it.
    project(cluster, dst, "codex", node="node3")
    composer.get_by_label("To project").select_option(f"{WS}/{src}")
    composer.get_by_label("To project").select_option(f"{WS}/{dst}")
    sync_api.expect(composer.get_by_role("button", name="Send")).to_be_enabled()
    sync_api.expect(note).to_be_hidden()
    sync_api.expect(composer.get_by_label("To agent").locator("option")).to_contain_text(
        ["Any of them", "codex"])


def test_the_address_fragment_picks_the_project_and_back_returns(
        cluster: Cluster, tab: Page) -> None:
    """The fragment names the project shown: an edited address switches to
    another project without a reload, Back returns to the one before, and a
    fragment naming no project the viewer may read changes nothing."""
    a, b = project(cluster, "frag-a"), project(cluster, "frag-b")
    in_b = send(cluster, a, b, "for b only", subject="to b")
    page = open_project(tab, cluster, a)
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    page.goto(f"{cluster.url('node1')}/web/inbox#{WS}/{b}")
    page.get_by_role("heading", name=f"{WS}/{b} · Received").wait_for()
    sync_api.expect(row(page, in_b)).to_be_visible()
    sync_api.expect(page.locator(f'nav a[data-project="{WS}/{b}"]')).to_have_attribute(
        "aria-current", "page")
    page.go_back()
    page.get_by_role("heading", name=f"{WS}/{a} · Received").wait_for()
    sync_api.expect(row(page, in_b)).to_have_count(0)
    page.goto(f"{cluster.url('node1')}/web/inbox#{WS}/no-such-project")
    sync_api.expect(page.locator("#project-title")).to_have_text(f"{WS}/{a} · Received")
    assert page.evaluate("window.__sameDocument") is True


def test_a_project_list_the_node_cannot_give_yet_is_asked_again(
        cluster: Cluster, tab: Page) -> None:
    """A node that cannot answer the project list (503 while it recovers)
    leaves the page saying why, and the list comes once the node answers."""
    name = project(cluster, "retry-a")
    page = tab.page
    refused: list[str] = []

    def once_unavailable(route: Any) -> None:
        if refused:
            route.continue_()
            return
        refused.append(route.request.url)
        route.fulfill(status=503, content_type="application/json",
                      body='{"error": "this member is recovering", "code": "recovering"}')

    page.route("**/web/api/projects", once_unavailable)
    page.goto(f"{cluster.url('node1')}/web/inbox#{WS}/{name}")
    sync_api.expect(page.locator("#list-error")).to_contain_text(
        "Could not load your projects (this member is recovering)")
    page.get_by_role("heading", name=f"{WS}/{name} · Received").wait_for()
    sync_api.expect(page.locator("#list-error")).to_have_text("")
    assert len(refused) == 1


def test_rows_show_a_160_character_snippet_of_the_body(cluster: Cluster, tab: Page) -> None:
    src, dst = project(cluster, "snip-a", "kimi"), project(cluster, "snip-b")
    # After the whitespace is folded, the emoji is the 160th character: a cut
    # in UTF-16 units would split it.
    words = "line one\n\n  " + "x" * 150 + "\U0001f600" + " tail" * 40
    long_id = send(cluster, src, dst, words, subject="long one")
    short_id = send(cluster, src, dst, "just a short note", subject="short one")
    page = open_project(tab, cluster, dst)
    flat = " ".join(words.split())
    want = "".join(list(flat)[:160]) + "\u2026"
    sync_api.expect(row(page, long_id).locator("td.snippet")).to_have_text(want)
    assert len(list(want)) == 161 and want.endswith("\U0001f600\u2026")
    sync_api.expect(row(page, short_id).locator("td.snippet")).to_have_text("just a short note")
    # The header names the column; the full body is still one click away.
    sync_api.expect(page.get_by_role("columnheader", name="Snippet")).to_be_visible()
    detail = expand(page, long_id)
    sync_api.expect(detail.get_by_label("Message text")).to_have_text(words)


def test_an_agent_cards_message_button_opens_the_composer_addressed_to_it(
        cluster: Cluster, tab: Page) -> None:
    src = project(cluster, "card-a", "kimi")
    dst = project(cluster, "card-b", "codex")
    project(cluster, "card-b", "claude-code")
    page = open_project(tab, cluster, dst)
    cards = page.get_by_role("region", name=f"Agents in {WS}/{dst}")
    sync_api.expect(cards.locator("article.agent-card")).to_have_count(2)
    cards.get_by_role("article", name="Agent codex").get_by_role("button", name="Message").click()
    composer = page.get_by_role("region", name="Message", exact=True)
    sync_api.expect(composer).to_be_visible()
    sync_api.expect(composer.get_by_label("To project")).to_have_value(f"{WS}/{dst}")
    sync_api.expect(composer.get_by_label("To agent")).to_have_value("codex")
    # The sender is a project the viewer picks (the card's own by default).
    sync_api.expect(composer.get_by_label("From project")).to_have_value(f"{WS}/{dst}")
    composer.get_by_label("From project").select_option(f"{WS}/{src}")
    composer.get_by_label("To project").select_option(f"{WS}/{dst}")
    composer.get_by_label("To agent").select_option("codex")
    composer.get_by_label("Subject").fill("from the agent card")
    composer.get_by_label("Message text").fill("for codex only")
    composer.get_by_role("button", name="Send").click()
    sync_api.expect(composer.get_by_role("alert")).to_contain_text("Sent")
    assert pop(cluster, dst) is None  # addressed to codex: a shared pop gets nothing
    code, out = cluster.call("node3", "POST", "/api/v1/messages/pop",
                             {"workspace": WS, "project": dst, "agent": "codex"})
    assert code == 200 and out["message"]["subject"] == "from the agent card"
    assert out["message"]["to_agent"] == "codex" and out["provenance"]["from_project"] == src
    # Another card addresses its own agent.
    page.reload()
    page.get_by_role("heading", name=f"{WS}/{dst} · Received").wait_for()
    page.get_by_role("article", name="Agent claude-code").get_by_role(
        "button", name="Message").click()
    sync_api.expect(composer.get_by_label("To agent")).to_have_value("claude-code")


def test_edit_save_and_requeue_discard_and_the_held_banner(cluster: Cluster, tab: Page) -> None:
    src, dst = project(cluster, "eps", "kimi"), project(cluster, "zeta")
    ids = [send(cluster, src, dst, f"original {i}", subject=f"s{i}") for i in range(3)]
    page = open_project(tab, cluster, dst)
    detail = expand(page, ids[0])
    detail.get_by_role("button", name="Edit").click()
    editor = page.get_by_role("region", name="Edit message")
    sync_api.expect(editor.get_by_label("Message text")).to_have_value("original 0")
    sync_api.expect(page.locator("#held-banner")).to_contain_text("1 message is held for editing")
    # While it is held, an agent's pop (through another node) gets the next one.
    assert pop(cluster, dst)["id"] == ids[1]
    editor.get_by_label("Subject").fill("s0, clarified")
    editor.get_by_label("Message text").fill("clarified text")
    editor.get_by_role("button", name="Save and requeue").click()
    sync_api.expect(page.locator("#held-banner")).to_be_hidden()
    sync_api.expect(row(page, ids[0]).get_by_text("queued")).to_be_visible()
    # Same id, its old place (ahead of ids[2]), the new text.
    assert inbox_ids(cluster, dst) == [ids[0], ids[2]]
    first = pop(cluster, dst)
    assert first["id"] == ids[0] and "clarified text" in first["body"]
    assert first["subject"] == "s0, clarified"
    # Discard changes puts a message back unchanged; a second tab of the same
    # session sees it held and may continue or discard.
    detail = expand(page, ids[2])
    detail.get_by_role("button", name="Edit").click()
    page.get_by_role("region", name="Edit message").get_by_label("Message text").fill("nope")
    other = tab.ctx.new_page()
    other.goto(f"{cluster.url('node1')}/web/inbox#{WS}/{dst}")
    sync_api.expect(other.locator("#held-banner")).to_contain_text("1 message is held")
    other.locator("#held-banner").get_by_role("link").click()
    held_detail = other.locator(f"#detail-{ids[2]}")
    sync_api.expect(held_detail.get_by_role("button", name="Continue editing")).to_be_visible()
    held_detail.get_by_role("button", name="Discard changes").click()
    sync_api.expect(other.locator("#held-banner")).to_be_hidden()
    assert inbox_ids(cluster, dst) == [ids[2]]
    assert pop(cluster, dst)["body"].count("original 2") == 1


def test_an_edit_of_a_message_collected_meanwhile_says_so(cluster: Cluster, tab: Page) -> None:
    src, dst = project(cluster, "eta", "kimi"), project(cluster, "theta")
    mid = send(cluster, src, dst, "collect me")
    page = open_project(tab, cluster, dst)
    detail = expand(page, mid)
    assert pop(cluster, dst)["id"] == mid  # an agent collects it while the page is open
    detail.get_by_role("button", name="Edit").click()
    sync_api.expect(detail.get_by_role("alert")).to_contain_text("can no longer be edited")
    sync_api.expect(detail.get_by_role("alert")).to_contain_text("collected")
    assert page.get_by_role("region", name="Edit message").count() == 0


def test_a_script_body_renders_as_text(cluster: Cluster, tab: Page) -> None:
    src, dst = project(cluster, "iota", "kimi"), project(cluster, "kappa")
    mid = send(cluster, src, dst, XSS, subject=XSS)
    page = open_project(tab, cluster, dst)
    detail = expand(page, mid)
    sync_api.expect(detail.get_by_label("Message text")).to_have_text(XSS)
    sync_api.expect(row(page, mid).get_by_role("button")).to_have_text(XSS)
    page.wait_for_timeout(300)
    assert tab.dialogs == []
    assert page.locator("main script, main img").count() == 0


def test_csrf_refusals_from_the_browser_write_nothing(cluster: Cluster, tab: Page) -> None:
    src, dst = project(cluster, "lam", "kimi"), project(cluster, "mu")
    mid = send(cluster, src, dst, "keep me")
    page = open_project(tab, cluster, dst)
    payload = {"from_workspace": WS, "from_project": src, "to_workspace": WS,
               "to_project": dst, "body": "forged"}
    # Same origin, but without the token, with another session's token, without the UI header.
    other = Page(tab.ctx.browser)
    try:
        open_project(other, cluster, dst)
        theirs = other.page.evaluate("() => fetch('/web/api/me').then(r => r.json())")
    finally:
        other.close()
    for headers in ({"Content-Type": "application/json", "X-AI-Memory-UI": "1"},
                    {"Content-Type": "application/json", "X-AI-Memory-UI": "1",
                     "X-CSRF-Token": theirs["csrf_token"]},
                    {"Content-Type": "application/json"}):
        status = page.evaluate(
            "([h, p]) => fetch('/web/api/messages', {method: 'POST', headers: h, "
            "body: JSON.stringify(p)}).then(r => r.status)", [headers, payload])
        assert status == 403, headers
    for path in (f"/web/api/messages/{mid}/edit", "/web/api/messages"):
        status = page.evaluate(
            "(path) => fetch(path, {method: 'POST', headers: {'Content-Type': "
            "'application/json', 'X-AI-Memory-UI': '1'}, body: '{}'}).then(r => r.status)", path)
        assert status == 403, path
    # Cross-site: an attacker's page (another site, served by the browser's
    # router) posts an HTML form and a no-cors fetch to node1.
    target = cluster.url("node1") + "/web/api/messages"
    fields = "".join(f'<input name="{k}" value="{v}">' for k, v in payload.items())
    evil = (f'<html><body><form id="f" method="POST" action="{target}">{fields}</form>'
            "</body></html>")
    page.route("http://evil.test/**", lambda route: route.fulfill(
        status=200, content_type="text/html", body=evil))
    page.goto("http://evil.test/")
    with page.expect_navigation():
        page.evaluate("() => document.getElementById('f').submit()")
    assert "csrf_refused" in page.content()
    page.goto("http://evil.test/")
    page.evaluate(
        "([url, p]) => fetch(url, {method: 'POST', mode: 'no-cors', credentials: 'include', "
        "headers: {'Content-Type': 'text/plain'}, body: JSON.stringify(p)}).catch(() => 0)",
        [target, payload])
    page.wait_for_timeout(300)
    assert inbox_ids(cluster, dst) == [mid]  # nothing written
    code, out = cluster.call("node3", "GET",
                             f"/api/v1/messages?workspace={WS}&project={src}&box=outbox")
    assert code == 200 and [m["id"] for m in out["messages"]] == [mid]


@pytest.fixture(scope="module")
def keyed_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    data = tmp_path_factory.mktemp("webkeys")
    conf = data / "node.toml"
    conf.write_text('[auth]\nmode = "keys"\napi_keys = { "aim_web_test_key" = "alice" }\n')
    with daemon_process(data, "--config", str(conf)) as proc:
        yield proc


def test_key_login_and_logout(keyed_daemon: Any, tab: Page) -> None:
    page = tab.page
    page.goto(f"{keyed_daemon.url}/web/inbox")
    page.wait_for_url("**/web/login")
    page.get_by_role("textbox", name="API key").fill("wrong")
    page.get_by_role("button", name="Log in with key").click()
    sync_api.expect(page.get_by_role("alert")).to_contain_text("unknown API key")
    sync_api.expect(page.get_by_role("textbox", name="API key")).to_have_value("")
    page.get_by_role("textbox", name="API key").fill("aim_web_test_key")
    page.get_by_role("button", name="Log in with key").click()
    page.wait_for_url("**/web/inbox")
    sync_api.expect(page.get_by_text("Logged in as root")).to_be_visible()
    cookies = tab.ctx.cookies()
    web_cookie = next(c for c in cookies if c["name"].startswith("aim_web_"))
    assert web_cookie["httpOnly"] and web_cookie["sameSite"] == "Strict"
    assert page.evaluate("() => document.cookie") == ""  # not readable by scripts
    assert page.evaluate("() => localStorage.length + sessionStorage.length") == 0
    # PM-77: a key login is an ordinary session: its composer has no write-token field.
    from tests.cluster.harness import http
    code, body = http("POST", keyed_daemon.url + "/api/v1/sessions",
                      {"workspace": WS, "project": "keyed-a", "harness": "kimi"},
                      {"X-API-Key": "aim_web_test_key"})
    assert code == 201, body
    page.goto(f"{keyed_daemon.url}/web/inbox#{WS}/keyed-a")
    page.reload()  # the same page with another fragment: load the project list again
    page.get_by_role("heading", name=f"{WS}/keyed-a · Received").wait_for()
    page.locator(f'nav li:has(a[data-project="{WS}/keyed-a"])').get_by_role(
        "button", name="Message").click()
    sync_api.expect(page.get_by_role("region", name="Message", exact=True)).to_be_visible()
    sync_api.expect(page.locator("#write-token")).to_have_count(1)
    sync_api.expect(page.locator("#write-token")).to_be_hidden()
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/web/login")
    page.goto(f"{keyed_daemon.url}/web/inbox")
    page.wait_for_url("**/web/login")


def test_legacy_login_sends_only_with_a_write_token_it_then_forgets(
        keyed_daemon: Any, browser: Any) -> None:
    from tests.cluster.harness import http
    for proj, harness in (("legacy-a", "kimi"), ("legacy-b", "codex")):
        code, body = http("POST", keyed_daemon.url + "/api/v1/sessions",
                          {"workspace": WS, "project": proj, "harness": harness},
                          {"X-API-Key": "aim_web_test_key"})
        assert code == 201, body
    ctx = browser.new_context(http_credentials={"username": "ops",
                                                "password": "aim_web_test_key"})
    try:
        page = ctx.new_page()
        page.set_default_timeout(10_000)
        page.goto(f"{keyed_daemon.url}/web/legacy#{WS}/legacy-a")
        sync_api.expect(page.get_by_text("legacy login", exact=False)).to_be_visible()
        page.locator(f'nav li:has(a[data-project="{WS}/legacy-a"])').get_by_role(
            "button", name="Message").click()
        composer = page.get_by_role("region", name="Message")
        composer.get_by_label("To project").select_option(f"{WS}/legacy-b")
        composer.get_by_label("Message text").fill("sent from the legacy login")
        composer.get_by_role("button", name="Send").click()  # no write token: refused
        sync_api.expect(composer.get_by_role("alert")).to_contain_text("Not sent")
        composer.get_by_label("Write token").fill("aim_web_test_key")
        composer.get_by_role("button", name="Send").click()
        sync_api.expect(composer.get_by_role("alert")).to_contain_text("Sent")
        sync_api.expect(composer.get_by_label("Write token")).to_have_value("")
        assert page.evaluate("() => document.cookie + localStorage.length + "
                             "sessionStorage.length") == "00"
        assert "aim_web_test_key" not in page.url
        assert not any(c["name"].startswith("aim_web_") for c in ctx.cookies())
        code, out = http("GET", keyed_daemon.url + f"/api/v1/messages?workspace={WS}"
                                                   "&project=legacy-b&box=inbox",
                         headers={"X-API-Key": "aim_web_test_key"})
        assert code == 200 and [m["body"] for m in out["messages"]] == [
            "sent from the legacy login"]
    finally:
        ctx.close()


def test_legacy_login_sends_with_the_right_token_after_a_wrong_one(
        keyed_daemon: Any, browser: Any) -> None:
    """A wrong write token is refused without ending the browser's Basic
    login (a 403, not a 401), so the next send with the right token works
    with no reload, and the page goes on reading."""
    from tests.cluster.harness import http
    for proj, harness in (("legacy-c", "kimi"), ("legacy-d", "codex")):
        code, body = http("POST", keyed_daemon.url + "/api/v1/sessions",
                          {"workspace": WS, "project": proj, "harness": harness},
                          {"X-API-Key": "aim_web_test_key"})
        assert code == 201, body
    ctx = browser.new_context(http_credentials={"username": "ops",
                                                "password": "aim_web_test_key"})
    try:
        page = ctx.new_page()
        page.set_default_timeout(10_000)
        page.goto(f"{keyed_daemon.url}/web/legacy#{WS}/legacy-c")
        page.get_by_role("heading", name=f"{WS}/legacy-c · Received").wait_for()
        page.locator(f'nav li:has(a[data-project="{WS}/legacy-c"])').get_by_role(
            "button", name="Message").click()
        composer = page.get_by_role("region", name="Message", exact=True)
        composer.get_by_label("To project").select_option(f"{WS}/legacy-d")
        composer.get_by_label("Message text").fill("after a wrong token")
        composer.get_by_label("Write token").fill("not-a-key")
        composer.get_by_role("button", name="Send").click()
        sync_api.expect(composer.get_by_role("alert")).to_contain_text("Not sent")
        sync_api.expect(composer.get_by_role("alert")).to_contain_text("write token")
        sync_api.expect(composer.get_by_label("Write token")).to_have_value("")
        # The page still reads with its Basic login...
        status = page.evaluate("() => fetch('/web/api/projects').then(r => r.status)")
        assert status == 200
        # ...and the right token now sends, without a reload.
        composer.get_by_label("Write token").fill("aim_web_test_key")
        composer.get_by_role("button", name="Send").click()
        sync_api.expect(composer.get_by_role("alert")).to_contain_text("Sent")
        code, out = http("GET", keyed_daemon.url + f"/api/v1/messages?workspace={WS}"
                                                   "&project=legacy-d&box=inbox",
                         headers={"X-API-Key": "aim_web_test_key"})
        assert code == 200 and [m["body"] for m in out["messages"]] == ["after a wrong token"]
    finally:
        ctx.close()
