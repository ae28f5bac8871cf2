"""Record ids: random, or derived from an idempotency key.

A create with an ``Idempotency-Key`` gets
``uuid5(RECORD_NAMESPACE, f"{kind}:{sender}:{key}")``: the same sender
retrying the same key on any node names the same record, so the retry
re-asserts it instead of adding a second one. Two senders using the same
key get different ids. Without a key the id is a time-ordered uuid7
(:func:`common.randomid.uuid7`), which keeps the records' primary-key
indexes growing at their end.
"""

from __future__ import annotations

import re
import uuid

from common import limits
from common.errors import BadRequest
from common.lanes import mint
from common.randomid import uuid7

RECORD_NAMESPACE = uuid.UUID("6f1c2b7e-9a4d-5c3e-8b21-4d0e7a9f3c55")

# Ids in paths and id lists: what uuid7/uuid5 produce, plus the id
# characters of records imported from other ai-memory daemons.
RECORD_ID_RE = r"^[A-Za-z0-9_\-.:]{1,128}$"
_RECORD_ID = re.compile(RECORD_ID_RE)
_KEY = re.compile(r"^[A-Za-z0-9_\-:@./]+$")


def record_id(kind: str, sender: str | None, idempotency_key: str | None, *,
              key: str | None = None, lanes: int = 1) -> str:
    """A new record id; with an Idempotency-Key, the same one for every retry.
    ``key``: the op key the record goes under, whose lane of ``lanes`` the id
    names (:func:`common.lanes.mint`)."""
    name = f"{kind}:{sender or ''}:{idempotency_key}"

    def make(n: int) -> str:
        if idempotency_key is None:
            return uuid7()
        return str(uuid.uuid5(RECORD_NAMESPACE, name if n == 0 else f"{name}#{n}"))
    return make(0) if key is None or lanes == 1 else mint(key, lanes, make)


def check_record_id(value: str, what: str = "id") -> str:
    if not _RECORD_ID.fullmatch(value):
        raise BadRequest(f"{what} must be 1-128 characters of [A-Za-z0-9_-.:]")
    return value


def check_idempotency_key(value: str | None) -> str | None:
    """The ``Idempotency-Key`` header, validated (absent or empty: None)."""
    if not value:
        return None
    if len(value) > limits.request_id_max_chars or not _KEY.fullmatch(value):
        raise BadRequest(
            f"Idempotency-Key must be 1-{limits.request_id_max_chars} characters of "
            "[A-Za-z0-9_-:@./] (limits.request_id_max_chars)")
    return value
