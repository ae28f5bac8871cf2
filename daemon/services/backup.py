"""A consistent copy of this node's database (``POST /api/v1/admin/backup``).

The copy is taken with SQLite's online backup API on a worker thread (see
:mod:`store.backup`) into a temporary file beside the database; the handler
streams it and removes it. Who may ask, and one backup at a time, are the
handler's business (daemon/api/backup.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from common.randomid import token_hex
from daemon.ports import BackupPorts
from store.backup import BackupInfo, online_backup


def temporary_path(node: BackupPorts) -> str:
    return f"{node.settings.store.db_path}.backup-{token_hex(6)}.tmp"


async def copy_to(node: BackupPorts, dest: str) -> BackupInfo:
    """Copy the database to ``dest`` and describe what the copy holds."""
    info = await asyncio.to_thread(online_backup, node.settings.store.db_path, dest, node.node_id)
    node.metrics.inc("backups_total")
    return info


def remove_copy(path: str) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
