"""``ai-memory hook session-start|prompt`` fed the JSON a harness sends, against a real node;
``install-hooks`` and ``skill install`` against real files."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from tests.cli.stub import StubDaemon
from tests.mcp.test_stdio_e2e import ROOT, Node, _http

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("hook-node"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


def run_hook(node_url: str, args: list[str], event: dict[str, object], state: Path,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "--url", node_url, "hook", *args, "--state-dir", str(state)],
        input=json.dumps(event), capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", ""), **(env or {})})


def project_dir(tmp: Path, name: str, *, on_prompt: bool | None = None) -> Path:
    d = tmp / name
    d.mkdir()
    text = f'[project]\nworkspace = "default"\nname = "{name}"\n'
    if on_prompt is not None:
        text += f"[messaging]\ninbox_notice_on_prompt = {'true' if on_prompt else 'false'}\n"
    (d / ".ai-memory.toml").write_text(text)
    return d


def send(node: Node, to: str, sender: str, body: str = "please look") -> str:
    status, reply = _http("POST", node.url + "/api/v1/messages", {
        "to_workspace": "default", "to_project": to, "from_workspace": "default",
        "from_project": sender, "body": body})
    assert status == 201, reply
    return str(reply["message_id"])


def pop(node: Node, project: str) -> None:
    status, reply = _http("POST", node.url + "/api/v1/messages/pop",
                          {"workspace": "default", "project": project})
    assert status == 200 and reply["message"], reply


def test_session_start_registers_and_prints_the_notice_only_with_mail(
        node: Node, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    proj, other = f"p-{suffix}", f"o-{suffix}"
    here = project_dir(tmp_path, proj)
    node.start_session("default", other, "kimi")
    sid = str(uuid.uuid4())
    event = {"session_id": sid, "cwd": str(here), "hook_event_name": "SessionStart",
             "source": "startup", "transcript_path": "/dev/null"}
    quiet = run_hook(node.url, ["session-start", "--harness", "claude-code"], event, tmp_path / "s")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == ""  # no mail: nothing put in front of the agent
    status, projects = _http("GET", node.url + "/api/v1/projects")
    assert status == 200, projects
    row = next(p for p in projects["projects"] if p["project"] == proj)
    assert row["harnesses"] == ["claude-code"]

    send(node, proj, other, body="SECRET BODY")
    loud = run_hook(node.url, ["session-start", "--harness", "claude-code"], event, tmp_path / "s")
    assert loud.returncode == 0, loud.stderr
    assert f"1 cross-project message waiting in the default/{proj} inbox" in loud.stdout
    assert f'`memory_message_pop` (workspace "default", project "{proj}")' in loud.stdout
    assert "untrusted input" in loud.stdout and "SECRET BODY" not in loud.stdout


def test_prompt_prints_only_when_opted_in_and_only_on_change(node: Node, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    proj, other, silent = f"q-{suffix}", f"r-{suffix}", f"s-{suffix}"
    here = project_dir(tmp_path, proj, on_prompt=True)
    quiet_dir = project_dir(tmp_path, silent, on_prompt=False)
    node.start_session("default", other, "kimi")
    node.start_session("default", silent, "claude-code")
    sid = str(uuid.uuid4())
    state = tmp_path / "state"
    assert run_hook(node.url, ["session-start", "--harness", "claude-code"],
                    {"session_id": sid, "cwd": str(here)}, state).returncode == 0

    def prompt(cwd: Path = here) -> str:
        done = run_hook(node.url, ["prompt", "--harness", "claude-code"],
                        {"session_id": sid, "cwd": str(cwd), "prompt": "go on",
                         "hook_event_name": "UserPromptSubmit"}, state)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert prompt() == ""  # nothing waiting
    send(node, proj, other)
    assert "1 cross-project message" in prompt()
    assert prompt() == ""  # same count, same names: not repeated
    send(node, proj, other)
    assert "2 cross-project messages" in prompt()
    assert prompt() == ""
    pop(node, proj)
    pop(node, proj)
    assert prompt() == ""  # drained: nothing to say, but remembered
    send(node, proj, other)
    assert "1 cross-project message" in prompt()  # new since the last notice

    send(node, silent, other)
    assert prompt(quiet_dir) == ""  # the project did not opt in
    assert len(list(state.glob("*.json"))) == 1  # one small file for the one session


def test_once_acts_on_the_first_prompt_of_a_session_only(node: Node, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    proj, other = f"k-{suffix}", f"l-{suffix}"
    here = project_dir(tmp_path, proj)
    node.start_session("default", other, "codex")
    node.start_session("default", proj, "kimi")
    send(node, proj, other)
    event = {"session_id": "kimi-" + suffix, "cwd": str(here), "prompt": "hi"}
    args = ["session-start", "--harness", "kimi", "--once"]
    first = run_hook(node.url, args, event, tmp_path / "st")
    second = run_hook(node.url, args, event, tmp_path / "st")
    assert "1 cross-project message" in first.stdout
    assert (second.returncode, second.stdout) == (0, "")


def test_a_node_that_is_down_never_fails_the_harness(tmp_path: Path) -> None:
    here = project_dir(tmp_path, "down")
    done = run_hook("http://127.0.0.1:9", ["session-start", "--harness", "codex"],
                    {"session_id": "x", "cwd": str(here)}, tmp_path / "st")
    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr.startswith("ai-memory hook:")


def test_install_hooks_prints_and_merges(tmp_path: Path) -> None:
    runner = CliRunner()
    printed = runner.invoke(cli, ["install-hooks", "--harness", "claude-code", "--url",
                                  "http://127.0.0.1:9077", "--dir", str(tmp_path), "--exe",
                                  "ai-memory"])
    assert printed.exit_code == 0, printed.output
    assert "hook session-start --harness claude-code" in printed.output
    assert not (tmp_path / ".claude").exists()  # printing writes nothing

    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash(ls)"]}, "hooks": {
        "SessionStart": [{"hooks": [{"type": "command", "command": "echo hi"}]}]}}))
    args = ["install-hooks", "--harness", "claude-code", "--dir", str(tmp_path), "--write",
            "--exe", "ai-memory", "--url", "http://127.0.0.1:9077"]
    assert runner.invoke(cli, args).exit_code == 0
    again = runner.invoke(cli, args)
    assert "already has the entries" in again.output
    data = json.loads(settings.read_text())
    assert data["permissions"] == {"allow": ["Bash(ls)"]}  # kept
    starts = [h["command"] for g in data["hooks"]["SessionStart"] for h in g["hooks"]]
    assert starts[0] == "echo hi" and len(starts) == 2
    assert "hook session-start --harness claude-code" in starts[1]
    assert len(data["hooks"]["UserPromptSubmit"]) == 1
    mcp = json.loads((tmp_path / ".mcp.json").read_text())
    assert mcp["mcpServers"]["ai-memory"]["args"][0] == "mcp-bridge"

    for harness, base, toml_file in [("codex", tmp_path / "c", ".codex/config.toml"),
                                     ("kimi", tmp_path / "k", ".kimi/config.toml")]:
        args = ["install-hooks", "--harness", harness, "--dir", str(base), "--write",
                "--url", "127.0.0.1:9077"]
        assert runner.invoke(cli, args).exit_code == 0
        assert "already has" in runner.invoke(cli, args).output
        conf = tomllib.loads((base / toml_file).read_text())
        if harness == "codex":
            assert conf["mcp_servers"]["ai-memory"]["env_vars"] == ["CODEX_THREAD_ID"]
            assert conf["features"]["codex_hooks"] is True
            hooks = json.loads((base / ".codex" / "hooks.json").read_text())["hooks"]
            assert set(hooks) == {"SessionStart", "UserPromptSubmit"}
        else:
            [entry] = conf["hooks"]
            assert entry["event"] == "UserPromptSubmit" and "--once" in entry["command"]
            assert "ai-memory" in json.loads((base / ".kimi" / "mcp.json").read_text())[
                "mcpServers"]


def test_install_hooks_names_every_node_given(tmp_path: Path) -> None:
    urls = ["http://10.0.0.1:9077", "http://10.0.0.2:9077", "http://10.0.0.3:9077"]
    runner = CliRunner()
    for given in (["--url", urls[0], "--url", "10.0.0.2:9077,http://10.0.0.3:9077"],
                  ["--url", ",".join(urls), "--url", urls[1]]):  # repeats are dropped
        done = runner.invoke(cli, ["install-hooks", "--harness", "claude-code", "--dir",
                                   str(tmp_path), "--exe", "aim", *given])
        assert done.exit_code == 0, done.output
        assert done.stderr == f"the entries use {', '.join(urls)}: given with --url\n"
        printed = done.stdout
        assert '"mcp-bridge",\n        "--url",\n        "' + ",".join(urls) + '"' in printed
        assert f"aim hook session-start --harness claude-code --url {','.join(urls)}" in printed
        assert f"aim hook prompt --harness claude-code --url {','.join(urls)}" in printed


def test_install_hooks_says_when_it_could_not_ask_for_the_members(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:9", "install-hooks", "--harness",
                                    "codex", "--dir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert done.stderr.startswith(
        "the entries use http://127.0.0.1:9: that node alone, since asking it for its cluster's "
        "members failed (cannot connect")
    assert done.stderr.rstrip().endswith("pass --url once per node")
    assert '"mcp-bridge", "--url", "http://127.0.0.1:9"' in done.stdout


def test_a_hook_falls_back_to_the_next_node(node: Node, tmp_path: Path) -> None:
    here = project_dir(tmp_path, "fallback")
    down = "http://127.0.0.1:9"
    done = run_hook(down, ["session-start", "--harness", "codex", "--url",
                           f"{down},{node.url}"],
                    {"session_id": "fb-1", "cwd": str(here)}, tmp_path / "st")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    status, reply = _http("GET", node.url + "/api/v1/messages?workspace=default&project="
                          "fallback&box=inbox")
    assert status == 200 and reply["project_exists"] is not False  # recorded on the live node


def test_skill_install_writes_the_skill(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(cli, ["skill", "install", "--dir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    text = (tmp_path / "ai-memory-messaging" / "SKILL.md").read_text()
    assert text.startswith("---\nname: ai-memory-messaging\n")
    for word in ("memory_message_send", "memory_message_list", "memory_message_pop",
                 "memory_message_cancel", "untrusted input", "decision: ", "decision-reply: "):
        assert word in text, word
    assert "unchanged" in runner.invoke(cli, ["skill", "install", "--dir", str(tmp_path)]).output
    assert done.stdout == f"wrote {tmp_path / 'ai-memory-messaging' / 'SKILL.md'}\n"


def test_the_installed_skill_says_a_page_is_not_a_message(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["skill", "install", "--dir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    text = (tmp_path / "ai-memory-messaging" / "SKILL.md").read_text()
    front, _, body = text[4:].partition("\n---\n")
    # The description an agent's harness matches on says it, and a section explains it.
    assert "never a wiki page" in front and "memory_message_send" in front
    section = body.split("## A page is not a message\n", 1)[1].split("\n## ", 1)[0]
    for words in ("Only `memory_message_send` delivers", "`memory_write_page`", "`memory_store`",
                  "never appears in an inbox", "call `memory_message_send`",
                  "Do not write a page instead"):
        assert words in section, words


def test_skill_install_says_where_it_wrote_by_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = CliRunner().invoke(cli, ["skill", "install"], env={"HOME": str(home)})
    assert done.exit_code == 0, done.output
    path = home / ".claude" / "skills" / "ai-memory-messaging" / "SKILL.md"
    assert path.is_file() and done.stdout == f"wrote {path}\n"
    assert "Claude Code's personal skills" in done.stderr
    assert "--dir .claude/skills for this project only" in done.stderr


def test_install_hooks_writes_the_cluster_ca_into_every_entry(tmp_path: Path) -> None:
    """On an https cluster the entries name the CA (the harness's environment
    may not carry AI_MEMORY_CA_CERT), in a form the commands parse back."""
    ca = tmp_path / "my ca" / "ca.crt"
    done = CliRunner().invoke(cli, ["--ca-cert", str(ca), "install-hooks", "--harness", "codex",
                                    "--dir", str(tmp_path / "p"), "--write", "--exe", "aim",
                                    "--url", "https://10.0.0.1:9077"])
    assert done.exit_code == 0, done.output
    hooks = json.loads((tmp_path / "p" / ".codex" / "hooks.json").read_text())["hooks"]
    for event in ("SessionStart", "UserPromptSubmit"):
        [command] = [h["command"] for g in hooks[event] for h in g["hooks"]]
        argv = shlex.split(command)
        assert argv[:3] == ["aim", "--ca-cert", str(ca.resolve())], argv  # a global option
        assert argv[3] == "hook"
    bridge = tomllib.loads((tmp_path / "p" / ".codex" / "config.toml").read_text())
    args = bridge["mcp_servers"]["ai-memory"]["args"]
    assert args == ["mcp-bridge", "--url", "https://10.0.0.1:9077", "--ca-cert", str(ca.resolve())]
    plain = CliRunner().invoke(cli, ["install-hooks", "--harness", "codex", "--exe", "aim",
                                     "--dir", str(tmp_path), "--url", "http://127.0.0.1:9077"],
                               env={"AI_MEMORY_CA_CERT": ""})
    assert "--ca-cert" not in plain.stdout


OLDER_SERVER_PARAMS = {"inbox_only": "1", "handoff": "0", "recovery": "0", "profile_digest": "0"}


def test_the_prompt_hook_asks_an_older_server_for_the_notice_only(
        stub: StubDaemon, tmp_path: Path) -> None:
    """PM-115: the prompt hook's notice fetch also sends ``handoff=0``,
    ``recovery=0`` and ``profile_digest=0``, so a server that ignores
    ``inbox_only`` still claims nothing and builds nothing."""
    here = project_dir(tmp_path, "notice-proj", on_prompt=True)
    stub.reply("GET", "/handoff", {
        "notice": "1 cross-project message waiting", "pending_message_count": 1,
        "workspace": "default", "project": "notice-proj"})
    event = {"session_id": "s-115", "cwd": str(here), "prompt": "go on",
             "hook_event_name": "UserPromptSubmit"}
    done = CliRunner().invoke(cli, ["--url", stub.url, "hook", "prompt", "--harness",
                                    "claude-code", "--state-dir", str(tmp_path / "s")],
                              input=json.dumps(event))
    assert done.exit_code == 0, done.output
    assert "1 cross-project message waiting" in done.output
    [fetched] = [r for r in stub.requests if (r.method, r.path) == ("GET", "/handoff")]
    assert {k: fetched.query.get(k) for k in OLDER_SERVER_PARAMS} == OLDER_SERVER_PARAMS
    assert fetched.query["workspace"] == "default" and fetched.query["project"] == "notice-proj"
