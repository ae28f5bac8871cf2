"""``listen``'s state file: where each stream resumes, and what was handled.

The file is JSON, rewritten whole (a temporary file, fsync, rename) each
time an event is finished::

    {"version": 1, "listener_id": "...",
     "cursors": {"inbox:bob": "v1....", "mbox:default/proj": "v1...."},
     "handled": ["notify:<id>", "message:<id>", ...],
     "claims": {"<message id>": ["<pop request id>", ...]}}

``cursors`` holds, per stream, the last event id (the daemon's
``Last-Event-ID``) up to which every event is finished. Events run
concurrently and may finish out of order, so :class:`Order` keeps the
events of a stream in arrival order and moves the cursor only over a
finished prefix. ``handled`` remembers the ids of the last
``limits.listen_handled_ids_max`` finished events, so an event that comes
again (a resume from the cursor after a restart or a failover, an event the
daemon repeats) is dropped rather than run twice. ``claims`` keeps the
request id of every pop ``--claim`` sent for a message not yet finished: a
pop repeated with its request id returns the same message, so a listener
killed between its claim and its command gets the message back.

An exclusive ``flock`` on ``FILE.lock`` keeps a second listener off the
same state file.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import uuid
from collections import deque
from pathlib import Path
from typing import IO, Any

from common import limits
from common.errors import BadRequest, Conflict

VERSION = 1


class Entry:
    """One event of a stream, from its arrival to its end."""

    __slots__ = ("cursor", "done")

    def __init__(self, cursor: str | None) -> None:
        self.cursor = cursor
        self.done = False


class Order:
    """The events of one stream in arrival order; the cursor moves over a finished prefix."""

    def __init__(self) -> None:
        self.entries: deque[Entry] = deque()

    def arrive(self, cursor: str | None) -> Entry:
        entry = Entry(cursor)
        self.entries.append(entry)
        return entry

    def finish(self, entry: Entry) -> str | None:
        """Mark ``entry`` finished; the new cursor if the finished prefix grew past one."""
        entry.done = True
        cursor = None
        while self.entries and self.entries[0].done:
            head = self.entries.popleft()
            if head.cursor is not None:
                cursor = head.cursor
        return cursor


class ListenState:
    """The state file, loaded, locked and saved (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self._lock_file: IO[str] | None = None
        self.listener_id = str(uuid.uuid4())
        self.cursors: dict[str, str] = {}
        self.handled: deque[str] = deque(maxlen=limits.listen_handled_ids_max)
        self._handled_set: set[str] = set()
        self.claims: dict[str, list[str]] = {}
        self.orders: dict[str, Order] = {}

    @classmethod
    def open(cls, path: Path) -> ListenState:
        state = cls(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(f"{path}.lock", "a", encoding="utf-8")  # held until close()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise Conflict(f"another listener holds {path}: give each listener its own --state "
                           "file") from None
        state._lock_file = lock
        if path.exists():
            state._load()
        else:
            state.save()
        return state

    def _load(self) -> None:
        try:
            data: Any = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BadRequest(f"cannot read the listener's state file {self.path}: {exc}") from exc
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise BadRequest(f"{self.path} is not a state file of this listener (version "
                             f"{VERSION})")
        self.listener_id = str(data.get("listener_id") or self.listener_id)
        self.cursors = {str(k): str(v) for k, v in (data.get("cursors") or {}).items()}
        for key in data.get("handled") or []:
            self._remember(str(key))
        self.claims = {str(k): [str(r) for r in v] for k, v in (data.get("claims") or {}).items()}

    def _remember(self, key: str) -> None:
        if len(self.handled) == self.handled.maxlen:
            self._handled_set.discard(self.handled[0])
        self.handled.append(key)
        self._handled_set.add(key)

    def save(self) -> None:
        """Write the file whole and durably; call with ``lock`` held (or before threads start)."""
        data = {"version": VERSION, "listener_id": self.listener_id, "cursors": self.cursors,
                "handled": list(self.handled), "claims": self.claims}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, separators=(",", ":"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # -- what the listener asks -------------------------------------------------
    def cursor(self, stream: str) -> str | None:
        with self.lock:
            return self.cursors.get(stream)

    def was_handled(self, key: str) -> bool:
        with self.lock:
            return key in self._handled_set

    def arrive(self, stream: str, cursor: str | None) -> Entry:
        with self.lock:
            return self.orders.setdefault(stream, Order()).arrive(cursor)

    def finish(self, stream: str, entry: Entry, key: str | None = None,
               claimed: str | None = None) -> None:
        """The event is over: remember its key, move the cursor, forget its pops, save."""
        with self.lock:
            if key is not None and key not in self._handled_set:
                self._remember(key)
            if claimed is not None:
                self.claims.pop(claimed, None)
            cursor = self.orders.setdefault(stream, Order()).finish(entry)
            if cursor is not None:
                self.cursors[stream] = cursor
            if key is not None or claimed is not None or cursor is not None:
                self.save()

    def claim_ids(self, message_id: str) -> list[str]:
        with self.lock:
            return list(self.claims.get(message_id, ()))

    def new_claim_id(self, message_id: str) -> str:
        """A fresh pop request id for ``message_id``, saved before the pop is sent."""
        rid = f"listen-{self.listener_id}-{uuid.uuid4().hex[:12]}"
        with self.lock:
            self.claims.setdefault(message_id, []).append(rid)
            self.save()
        return rid

    def close(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
