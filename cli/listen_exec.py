"""``listen --exec``: run the operator's command for one event.

The command runs through the shell (``sh -c CMD``) in its own process group,
with the event as one JSON document on stdin and its main fields in
environment variables (:func:`event_env`). A run that exits non-zero, or
outlives ``--timeout`` (then its whole group is killed), is a failure; it is
run again after ``min(backoff_max, 1s * 2**n)`` up to ``--retries`` more
times. When every run failed the event goes to the dead-letter file (one
JSON line: the event, the exit status, the tail of stderr), durably, and a
line on stderr says so; only then is the event finished, so the cursor never
passes a failure that is not written down.

Nothing secret is put in the environment: the listener's own
``AI_MEMORY_KEY`` and ``AI_MEMORY_API_KEY`` are taken out of what the
command inherits. A command that must call the daemon brings its own key.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import limits

SECRET_ENV = ("AI_MEMORY_KEY", "AI_MEMORY_API_KEY")
STDERR_TAIL_CHARS = 2000


def _text(value: Any) -> str:
    return "" if value is None else str(value).replace("\0", "")


def event_env(event: Mapping[str, Any], attempt: int) -> dict[str, str]:
    """The variables a command gets for ``event`` (the JSON its stdin gets)."""
    data = event.get("data") or {}
    env = {"AI_MEMORY_EVENT": _text(event.get("event")),
           "AI_MEMORY_EVENT_ID": _text(event.get("id")),
           "AI_MEMORY_MESSAGE_ID": _text(event.get("id")),
           "AI_MEMORY_ATTEMPT": str(attempt),
           "AI_MEMORY_CLAIMED": "1" if event.get("claimed") else "0"}
    note = data.get("notification") if isinstance(data, dict) else None
    msg = data.get("message") if isinstance(data, dict) else None
    # A claimed message's details are the pop's (a requeued message's event,
    # live, names only its id and delivery: its subject and sender come
    # from the claim).
    popped = (event.get("claimed") or {}).get("message") if isinstance(
        event.get("claimed"), dict) else None
    if isinstance(popped, dict):
        msg = popped
    if isinstance(note, dict):
        env.update(AI_MEMORY_FROM=_text(note.get("from")), AI_MEMORY_TO=_text(note.get("to")),
                   AI_MEMORY_SUBJECT=_text(note.get("title")),
                   AI_MEMORY_PRIORITY=_text(note.get("priority")),
                   AI_MEMORY_CREATED_AT=_text(note.get("created_at")))
    elif isinstance(msg, dict):
        sender = msg.get("from_agent") or ""
        env.update(AI_MEMORY_FROM=_text(sender),
                   AI_MEMORY_FROM_PROJECT=_text(f"{msg.get('from_workspace_id') or ''}/"
                                                f"{msg.get('from_project_id') or ''}"),
                   AI_MEMORY_SUBJECT=_text(msg.get("subject")),
                   AI_MEMORY_NATURE=_text(msg.get("nature")),
                   AI_MEMORY_WORKSPACE=_text(data.get("workspace")),
                   AI_MEMORY_PROJECT=_text(data.get("project")),
                   AI_MEMORY_CREATED_AT=_text(msg.get("created_at")))
    return env


@dataclass(frozen=True, slots=True)
class RunSettings:
    command: str
    timeout: float = limits.listen_timeout_default_secs
    retries: int = limits.listen_retries_default
    backoff_max: float = limits.listen_retry_backoff_max_secs


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    attempts: int
    status: str  # "exit 0", "exit 3", "timed out after 5s"
    stderr_tail: str


def _run_once(settings: RunSettings, event: Mapping[str, Any], attempt: int,
              started: Callable[[], None]) -> tuple[bool, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env.update(event_env(event, attempt))
    stdin = json.dumps(event, ensure_ascii=False).encode()
    proc = subprocess.Popen(["/bin/sh", "-c", settings.command], stdin=subprocess.PIPE,
                            stdout=None, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    started()
    try:
        _, err = proc.communicate(stdin, timeout=settings.timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, err = proc.communicate()
        return False, f"timed out after {settings.timeout:g}s", _tail(err)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise
    tail = _tail(err)
    if tail:
        os.write(2, err[-STDERR_TAIL_CHARS * 4:])  # the command's own stderr, passed on
    return proc.returncode == 0, f"exit {proc.returncode}", tail


def _tail(err: bytes | None) -> str:
    return (err or b"").decode("utf-8", "replace")[-STDERR_TAIL_CHARS:]


def run_command(settings: RunSettings, event: Mapping[str, Any], *,
                stop: threading.Event, note: Callable[[str], None],
                started: Callable[[], None] = lambda: None) -> Outcome:
    """Run the command for ``event`` with retries (see the module docstring)."""
    attempt = 0
    while True:
        attempt += 1
        ok, status, tail = _run_once(settings, event, attempt, started)
        if ok:
            return Outcome(True, attempt, status, tail)
        if attempt > settings.retries:
            return Outcome(False, attempt, status, tail)
        delay = min(settings.backoff_max, 2.0 ** (attempt - 1))
        note(f"listen: command for {event.get('event')} {event.get('id')} failed ({status}, "
             f"run {attempt} of {settings.retries + 1}); running it again in {delay:g}s")
        if stop.wait(delay):
            return Outcome(False, attempt, f"{status}; listener stopping", tail)


class DeadLetters:
    """The dead-letter file: one JSON line per event whose command never succeeded."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    def add(self, event: Mapping[str, Any], outcome: Outcome) -> None:
        line = json.dumps({"failed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time())),
                           "attempts": outcome.attempts, "status": outcome.status,
                           "stderr_tail": outcome.stderr_tail, "event": event},
                          ensure_ascii=False)
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
