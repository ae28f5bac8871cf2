"""The first root key, before anyone can call the API.

Two ways, both writing identity ops straight into one node's database as
ops of that node (the next free seqs of its origin), so they replicate to
the other members by anti-entropy once the cluster runs:

* ``ai-memory user add NAME --root --db PATH`` (:func:`add_root_offline`):
  the node is not running; a new random key is printed once.
* ``AI_MEMORY_ROOT_KEY`` or ``[auth] bootstrap_root_key_file`` on ``serve``
  (:func:`ensure_root_key`): at start, before the core loads, the node
  writes the root user and that key unless it already holds them. The key's
  id is derived from its hash, so every node given the same secret writes
  the same record, and a restart writes nothing.

Bootstrap ops carry HLC 0: they rank below every administrative write, so a
node that bootstraps late (a wiped member given the same secret) never
undoes a password set, a user removed or a key revoked elsewhere (removal
and revocation are sticky anyway; the low rank keeps the password and the
root flag too).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from common.errors import Conflict
from common.ops import APIKEY_PUT, IDENT_KEY, USER_PUT, Op
from daemon.identity.secrets import (
    hash_secret,
    key_id_for_hash,
    new_key_id,
    new_secret,
)
from store import identity as I
from store.db import Store

log = logging.getLogger("ai_memory.identity")

BOOTSTRAP_LABEL = "bootstrap"


async def _write_own(store: Store, node_id: str, items: list[tuple[str, dict[str, Any]]]) -> None:
    seq = store.max_seq(node_id)
    ops = [Op(origin=node_id, seq=seq + i + 1, hlc=0, kind=kind, key=IDENT_KEY, body=body)
           for i, (kind, body) in enumerate(items)]
    await store.apply_ops(ops, int(time.time() * 1000))


def _key_row(secret: str, user: str, key_id: str, now_ms: int) -> dict[str, Any]:
    return {"id": key_id, "user": user, "agent": None, "label": BOOTSTRAP_LABEL,
            "hash": hash_secret(secret), "created_at_ms": now_ms, "revoked": False}


def _user_row(name: str, now_ms: int) -> dict[str, Any]:
    return {"name": name, "root": True, "password_hash": None, "removed": False,
            "created_at_ms": now_ms}


async def add_root_offline(store: Store, node_id: str, name: str) -> dict[str, Any]:
    """``user add NAME --root --db PATH``: a new root user and key in ``store``."""
    if await I.user(store.reads, name) is not None:
        raise Conflict(f"user {name!r} already exists in this database", user=name)
    now = int(time.time() * 1000)
    secret = new_secret()
    key = _key_row(secret, name, new_key_id(), now)
    await _write_own(store, node_id, [(USER_PUT, _user_row(name, now)), (APIKEY_PUT, key)])
    return {"user": name, "root": True, "id": key["id"], "key": secret}


async def ensure_root_key(store: Store, node_id: str, secret: str, user: str) -> bool:
    """Write the root user and the given key unless this node holds them;
    True if anything was written."""
    digest = hash_secret(secret)
    now = int(time.time() * 1000)
    items: list[tuple[str, dict[str, Any]]] = []
    if await I.user(store.reads, user) is None:
        items.append((USER_PUT, _user_row(user, now)))
    if not await I.keys_by_hash(store.reads, digest):
        items.append((APIKEY_PUT, _key_row(secret, user, key_id_for_hash(digest), now)))
    if items:
        await _write_own(store, node_id, items)
        log.info("bootstrap root key for user %r written (%s)", user, key_id_for_hash(digest))
    return bool(items)
