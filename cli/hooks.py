"""``ai-memory hook session-start|prompt`` and ``ai-memory install-hooks``.

A harness runs the hook commands at its lifecycle points and hands them the
event as JSON on stdin (``session_id``, ``cwd``, ``hook_event_name``, ...);
whatever a hook prints on stdout is put in front of the agent. So:

* ``hook session-start`` records the session with the node (workspace and
  project from ``.ai-memory.toml`` / ``AI_MEMORY_WORKSPACE``/``_PROJECT``
  in the event's ``cwd``, else ``default`` and the directory's name; the
  harness from ``--harness``), then prints the count-only inbox notice when
  mail is pending and nothing otherwise. With ``--once`` (for harnesses that
  drop SessionStart output, like Kimi, whose first prompt hook runs it
  instead) it acts only on the first call of a session.
* ``hook prompt`` (UserPromptSubmit) prints the same notice only when the
  project opts in (``[messaging] inbox_notice_on_prompt = true`` in
  ``.ai-memory.toml``) and only when the count or the inbox's names changed
  since this session's last notice. What it last saw is kept per session in a
  small JSON file under the state directory (``--state-dir``,
  ``AI_MEMORY_STATE_DIR``, else ``$XDG_STATE_HOME/ai-memory/hooks``); at most
  ``limits.hook_state_files_max`` such files are kept, oldest removed first.

The notice comes from ``GET /handoff?inbox_only=1``: a count and names only,
never a message's text. A hook never fails the harness: a node that cannot be
reached or refuses is reported on stderr and the hook exits 0.

``install-hooks`` prints (or with ``--write`` merges into the harness's own
files) the hook entries and the ``mcp-bridge`` MCP entry for Claude Code,
Codex or Kimi.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import click

from cli.client import DEFAULT_URL, ApiClient
from cli.scope import CONFIG_FILE, resolve_scope
from cli.state import CliState, pass_state
from common import limits
from common.errors import AiMemoryError, BadRequest
from daemon.mcp.settings import session_from_env

HARNESSES = ("claude-code", "codex", "kimi")
SESSION_HEADER = "x-memory-actor-session-id"
_SCOPE_CHARS = re.compile(r"[^A-Za-z0-9_\-.]+")


# -- the hook event --------------------------------------------------------------

def read_event(stream: Any = None) -> dict[str, Any]:
    """The harness's hook JSON from stdin; ``{}`` when there is none."""
    stream = stream or sys.stdin
    if stream.isatty():
        return {}
    raw = stream.read(limits.request_body_max_bytes + 1)
    if not raw.strip():
        return {}
    try:
        event = json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"hook input on stdin is not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise BadRequest("hook input on stdin must be a JSON object")
    return event


def _session_id(event: dict[str, Any]) -> str | None:
    value = event.get("session_id") or event.get("sessionId") or event.get("thread_id")
    if isinstance(value, str) and value.strip():
        return value.strip()
    return session_from_env(os.environ)[0]


def _cwd(event: dict[str, Any]) -> Path:
    value = event.get("cwd")
    return Path(value) if isinstance(value, str) and value else Path.cwd()


def project_for(cwd: Path) -> tuple[str, str]:
    """The project a hook speaks for: named in config or env, else default/<dir name>."""
    scope = resolve_scope(cwd=cwd)
    if scope is not None:
        return scope.workspace, scope.project
    name = _SCOPE_CHARS.sub("-", cwd.resolve().name).strip("-.")[:limits.scope_name_max_chars]
    return "default", name or "default"


def notice_on_prompt(cwd: Path) -> bool:
    """``[messaging] inbox_notice_on_prompt`` of the nearest ``.ai-memory.toml`` that has it."""
    for directory in (cwd, *cwd.parents):
        candidate = directory / CONFIG_FILE
        if not candidate.is_file():
            continue
        try:
            with candidate.open("rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise BadRequest(f"cannot read {candidate}: {exc}") from exc
        table = data.get("messaging")
        if isinstance(table, dict) and "inbox_notice_on_prompt" in table:
            return table["inbox_notice_on_prompt"] is True
    return False


# -- per-session state --------------------------------------------------------------

def state_dir(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get("AI_MEMORY_STATE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ai-memory" / "hooks"


class SessionState:
    """What one session's hooks last saw, in ``<dir>/<sha256(session)>.json``."""

    def __init__(self, directory: Path, key: str) -> None:
        self.directory = directory
        self.path = directory / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def load(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def save(self, data: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)
        files = sorted(self.directory.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in files[:-limits.hook_state_files_max]:
            old.unlink(missing_ok=True)


# -- talking to the node -------------------------------------------------------------

def _client(state: CliState) -> ApiClient:
    return ApiClient(state.url or DEFAULT_URL, agent_id=state.agent_id, api_key=state.api_key,
                     ca_cert=state.ca_cert,
                     timeout=limits.hook_http_timeout_secs)


def fetch_notice(client: ApiClient, workspace: str, project: str, harness: str,
                 session_id: str | None) -> dict[str, Any]:
    headers = {SESSION_HEADER: session_id} if session_id else None
    reply = client.request("GET", "/handoff", params={
        "inbox_only": "1", "handoff": "0", "recovery": "0", "profile_digest": "0",
        "workspace": workspace, "project": project, "harness": harness}, headers=headers)
    if not isinstance(reply, dict):
        raise BadRequest("the node's /handoff answer is not a JSON object")
    return reply


def _seen(reply: dict[str, Any]) -> dict[str, Any]:
    return {"count": reply.get("pending_message_count"), "workspace": reply.get("workspace"),
            "project": reply.get("project")}


def _report(exc: AiMemoryError) -> None:
    click.echo(f"ai-memory hook: {exc.message}", err=True)


# -- commands ------------------------------------------------------------------------------

@click.group("hook")
def hook() -> None:
    """Commands a harness runs from its SessionStart / UserPromptSubmit hooks."""


_harness = click.option("--harness", type=click.Choice(HARNESSES), required=True,
                        help="Which harness runs the hook.")
_state = click.option("--state-dir", "state_dir_opt", default=None,
                      help="Where per-session notice state is kept (AI_MEMORY_STATE_DIR).")


@hook.command("session-start")
@_harness
@_state
@click.option("--once", is_flag=True,
              help="Act only on the first call of a session (run from a prompt hook).")
@pass_state
def session_start(state: CliState, harness: str, state_dir_opt: str | None,
                  once: bool) -> None:
    """Record this session with the node; print the inbox notice when mail waits."""
    event = read_event()
    sid = _session_id(event)
    cwd = _cwd(event)
    store = SessionState(state_dir(state_dir_opt), sid or f"cwd:{cwd}") if sid or once else None
    if once and store is not None and store.load() is not None:
        return
    try:
        workspace, project = project_for(cwd)
        client = _client(state)
        body: dict[str, Any] = {"workspace": workspace, "project": project, "harness": harness}
        if sid:
            body["session_id"] = sid
        client.post("/api/v1/sessions", body)
        reply = fetch_notice(client, workspace, project, harness, sid)
    except AiMemoryError as exc:
        _report(exc)
        return
    if store is not None:
        store.save({**_seen(reply), "at": time.time()})
    if reply.get("notice"):
        click.echo(reply["notice"])


@hook.command("prompt")
@_harness
@_state
@pass_state
def prompt(state: CliState, harness: str, state_dir_opt: str | None) -> None:
    """Print the inbox notice mid-session when the project opts in and it changed."""
    event = read_event()
    cwd = _cwd(event)
    try:
        if not notice_on_prompt(cwd):
            return
        sid = _session_id(event)
        workspace, project = project_for(cwd)
        reply = fetch_notice(_client(state), workspace, project, harness, sid)
    except AiMemoryError as exc:
        _report(exc)
        return
    store = SessionState(state_dir(state_dir_opt), sid or f"cwd:{cwd}")
    seen = _seen(reply)
    last = store.load()
    if last is not None and {k: last.get(k) for k in seen} == seen:
        return
    store.save({**seen, "at": time.time()})
    if reply.get("notice"):
        click.echo(reply["notice"])


# -- install-hooks ----------------------------------------------------------------------------

def _exe() -> str:
    return shutil.which("ai-memory") or "ai-memory"


def plan(harness: str, base: Path, url: str, exe: str) -> list[tuple[Path, str, Any]]:
    """What to add where: (file, "json"|"toml", entries) for one harness."""
    bridge = {"command": exe, "args": ["mcp-bridge", "--url", url]}
    start = f"{exe} --url {url} hook session-start --harness {harness}"
    on_prompt = f"{exe} --url {url} hook prompt --harness {harness}"
    if harness == "claude-code":
        hooks_cc: dict[str, Any] = {"hooks": {
            "SessionStart": [{"hooks": [{"type": "command", "command": start}]}],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": on_prompt}]}],
        }}
        return [(base / ".claude" / "settings.json", "json", hooks_cc),
                (base / ".mcp.json", "json", {"mcpServers": {"ai-memory": bridge}})]
    if harness == "codex":
        hooks: dict[str, Any] = {"hooks": {
            "SessionStart": [{"matcher": "startup|resume|clear",
                              "hooks": [{"type": "command", "command": start, "timeout": 10}]}],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": on_prompt,
                                             "timeout": 10}]}],
        }}
        toml = ("\n[mcp_servers.ai-memory]\n"
                f"command = {json.dumps(exe)}\n"
                f"args = {json.dumps(bridge['args'])}\n"
                'env_vars = ["CODEX_THREAD_ID"]\n')
        return [(base / ".codex" / "hooks.json", "json", hooks),
                (base / ".codex" / "config.toml", "toml",
                 {"mcp_servers.ai-memory": toml, "features.codex_hooks": "\n[features]\ncodex_hooks = true\n"})]
    # kimi drops SessionStart output: its first prompt hook starts the session
    first = f"{exe} --url {url} hook session-start --harness kimi --once"
    toml_hook = f'\n[[hooks]]\nevent = "UserPromptSubmit"\ncommand = {json.dumps(first)}\ntimeout = 10\n'
    return [(base / ".kimi" / "config.toml", "toml", {"hooks": toml_hook}),
            (base / ".kimi" / "mcp.json", "json", {"mcpServers": {"ai-memory": bridge}})]


def _merge_json(existing: Any, add: Any) -> Any:
    """``add`` merged into ``existing``: objects key by key, hook lists without repeats."""
    if isinstance(existing, dict) and isinstance(add, dict):
        out = dict(existing)
        for k, v in add.items():
            out[k] = _merge_json(existing[k], v) if k in existing else v
        return out
    if isinstance(existing, list) and isinstance(add, list):
        return existing + [item for item in add if item not in existing]
    return add


def _has_toml(data: dict[str, Any], dotted: str, text: str) -> bool:
    if dotted == "hooks":
        hooks = data.get("hooks")
        command = text.split("command = ", 1)[1].split("\n", 1)[0]
        return isinstance(hooks, list) and any(
            json.dumps(h.get("command")) == command for h in hooks if isinstance(h, dict))
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def write_plan(entries: list[tuple[Path, str, Any]]) -> list[str]:
    """Merge every entry into its file; the lines to tell the user."""
    said: list[str] = []
    for path, kind, add in entries:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text() if path.exists() else ""
        if kind == "json":
            try:
                existing = json.loads(text) if text.strip() else {}
            except ValueError as exc:
                raise BadRequest(f"{path} is not JSON ({exc}); fix it or add the entries by hand") from None
            merged = _merge_json(existing, add)
            if merged != existing:
                path.write_text(json.dumps(merged, indent=2) + "\n")
                said.append(f"updated {path}")
            else:
                said.append(f"{path} already has the entries")
            continue
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise BadRequest(f"{path} is not TOML ({exc}); fix it or add the entries by hand") from None
        for dotted, block in add.items():
            if _has_toml(data, dotted, block):
                said.append(f"{path} already has {dotted}")
            elif "." in dotted and dotted.split(".")[0] in data and dotted != "mcp_servers.ai-memory":
                said.append(f"{path}: add `{dotted.split('.', 1)[1]} = true` to its "
                            f"[{dotted.split('.')[0]}] table by hand")
            else:
                text = text + ("" if not text or text.endswith("\n") else "\n") + block
                said.append(f"added {dotted} to {path}")
        path.write_text(text)
    return said


@click.command("install-hooks")
@click.option("--harness", type=click.Choice(HARNESSES), required=True)
@click.option("--write", is_flag=True, help="Merge the entries into the files instead of printing.")
@click.option("--dir", "base", default=None, type=click.Path(file_okay=False),
              help="Project directory (claude-code, codex; default: here) or home (kimi; "
                   "default: ~).")
@click.option("--exe", default=None, help="The ai-memory executable the entries run.")
@pass_state
def install_hooks(state: CliState, harness: str, write: bool, base: str | None,
                  exe: str | None) -> None:
    """Print (or --write) the hook and MCP entries a harness needs for ai-memory."""
    root = Path(base) if base else (Path.home() if harness == "kimi" else Path.cwd())
    entries = plan(harness, root, state.url or DEFAULT_URL, exe or _exe())
    if write:
        for line in write_plan(entries):
            click.echo(line)
        return
    for path, kind, add in entries:
        click.echo(f"# {path}")
        if kind == "json":
            click.echo(json.dumps(add, indent=2))
        else:
            click.echo("".join(add.values()).strip())
        click.echo("")
