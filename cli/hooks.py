"""``ai-memory hook session-start|prompt`` and ``ai-memory install-hooks``.

A harness runs the hook commands at its lifecycle points and hands them the
event as JSON on stdin (``session_id``, ``cwd``, ``hook_event_name``, ...);
whatever a hook prints on stdout is put in front of the agent. So:

* ``hook session-start`` records the session with the node (workspace and
  project from ``.ai-memory.toml`` / ``AI_MEMORY_WORKSPACE``/``_PROJECT``
  in the event's ``cwd``, else ``default`` and the directory's name; the
  harness from ``--harness``), then fetches ``GET /handoff``, which claims
  the project's pending handoff (once across the cluster, under one request
  id whichever node answers) and compiles the project brief when
  ``.ai-memory.toml`` sets ``[briefing] inject_on_session_start = true``;
  it prints the handoff, the brief and the count-only inbox notice, and
  nothing when there is none of them. With ``--once`` (for harnesses that
  drop SessionStart output, like Kimi, whose first prompt hook runs it
  instead) it acts only on the first call of a session.
* ``hook prompt`` (UserPromptSubmit) prints the same notice only when the
  project opts in (``[messaging] inbox_notice_on_prompt = true`` in
  ``.ai-memory.toml``) and only when the count or the inbox's names changed
  since this session's last notice. What it last saw is kept per session in a
  small JSON file under the state directory (``--state-dir``,
  ``AI_MEMORY_STATE_DIR``, else ``$XDG_STATE_HOME/ai-memory/hooks``); at most
  ``limits.hook_state_files_max`` such files are kept, oldest removed first.

The prompt hook's notice comes from ``GET /handoff?inbox_only=1``: a count
and names only, never a message's text, and it claims nothing. Both notices
also count the unread notifications of the hook's agent (``--agent-id`` /
``AI_MEMORY_AGENT_ID``, or the key's agent): how many and from whom, never
a title or a body; the prompt hook speaks again when that count changes. A hook never fails the harness: a node that cannot be
reached or refuses is reported on stderr and the hook exits 0.

Both take ``--url`` once per node (or comma-separated): the hook asks the
first node that answers, so a node that is down does not cost the notice.
``install-hooks`` (:mod:`cli.install_hooks`) writes the entries that run them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cli.client import DEFAULT_URL, ApiClient, CannotConnect, TransportFailed
from cli.handoff import brief_settings, fetch_start
from cli.node_urls import split_urls
from cli.scope import config_tables, resolve_scope
from cli.state import CliState, pass_state
from common import limits
from common.errors import AiMemoryError, BadRequest
from daemon.mcp.settings import session_from_env

T = TypeVar("T")
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
    for table, _path in config_tables(cwd, "messaging"):
        if "inbox_notice_on_prompt" in table:
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

def on_first_node(state: CliState, urls: tuple[str, ...],
                  call: Callable[[ApiClient], T]) -> T:
    """``call`` against the first of ``urls`` (else the global ``--url``) that answers.

    Only a node that cannot be reached or does not answer in time is passed
    over: recording a session is idempotent, so trying it on the next is safe.
    """
    candidates = split_urls(urls) or (state.url or DEFAULT_URL,)
    failed: AiMemoryError | None = None
    for url in candidates:
        client = ApiClient(url, agent_id=state.agent_id, api_key=state.api_key, key=state.key,
                           ca_cert=state.ca_cert, timeout=limits.hook_http_timeout_secs)
        try:
            return call(client)
        except (CannotConnect, TransportFailed) as exc:
            failed = exc
    assert failed is not None
    raise failed


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
            "project": reply.get("project"),
            "notifications": reply.get("unread_notification_count"),
            "agent": reply.get("notification_agent")}


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
_urls = click.option("--url", "urls", multiple=True,
                     help="A node's address; repeat (or separate with commas) to fall back "
                          "to the next when one is down. Default: the global --url.")


@hook.command("session-start")
@_harness
@_state
@_urls
@click.option("--once", is_flag=True,
              help="Act only on the first call of a session (run from a prompt hook).")
@pass_state
def session_start(state: CliState, harness: str, state_dir_opt: str | None,
                  urls: tuple[str, ...], once: bool) -> None:
    """Record this session with the node; print the inbox notice when mail waits."""
    event = read_event()
    sid = _session_id(event)
    cwd = _cwd(event)
    store = SessionState(state_dir(state_dir_opt), sid or f"cwd:{cwd}") if sid or once else None
    if once and store is not None and store.load() is not None:
        return
    try:
        workspace, project = project_for(cwd)
        body: dict[str, Any] = {"workspace": workspace, "project": project, "harness": harness}
        if sid:
            body["session_id"] = sid

        brief, budget = brief_settings(cwd)
        rid = f"start-{uuid.uuid4()}"  # one claim, whichever node answers

        def start(client: ApiClient) -> dict[str, Any]:
            client.post("/api/v1/sessions", body)
            return fetch_start(client, workspace=workspace, project=project, harness=harness,
                               session_id=sid, brief=brief, budget=budget, request_id=rid)

        reply = on_first_node(state, urls, start)
    except AiMemoryError as exc:
        _report(exc)
        return
    if store is not None:
        store.save({**_seen(reply), "at": time.time()})
    if reply.get("context"):
        click.echo(str(reply["context"]).rstrip("\n"))


@hook.command("prompt")
@_harness
@_state
@_urls
@pass_state
def prompt(state: CliState, harness: str, state_dir_opt: str | None,
           urls: tuple[str, ...]) -> None:
    """Print the inbox notice mid-session when the project opts in and it changed."""
    event = read_event()
    cwd = _cwd(event)
    try:
        if not notice_on_prompt(cwd):
            return
        sid = _session_id(event)
        workspace, project = project_for(cwd)
        reply = on_first_node(
            state, urls, lambda client: fetch_notice(client, workspace, project, harness, sid))
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
