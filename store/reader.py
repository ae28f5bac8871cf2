"""A small pool of read-only aiosqlite connections.

WAL lets readers run while the writer commits, so reads never wait for the
writer task. Each pooled connection is an aiosqlite connection (its own
thread) opened with ``query_only``; a query checks one out, runs
``execute_fetchall`` (one thread hop for statement plus rows) and returns
it. Each statement runs in autocommit, so it sees every commit that
finished before it started: a write acknowledged by :class:`store.writer.Writer`
is visible to the next read.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable
from typing import Any

import aiosqlite

from store.schema import BUSY_TIMEOUT_MS


class ReadPool:
    def __init__(self, conns: list[aiosqlite.Connection]) -> None:
        self._all = conns
        self._free: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        for conn in conns:
            self._free.put_nowait(conn)

    @classmethod
    async def open(cls, path: str, size: int) -> ReadPool:
        conns = []
        try:
            for _ in range(size):
                conn = await aiosqlite.connect(path, isolation_level=None)
                conns.append(conn)
                conn.row_factory = sqlite3.Row
                await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                await conn.execute("PRAGMA query_only = 1")
        except BaseException:
            for conn in conns:
                await conn.close()
            raise
        return cls(conns)

    async def fetchall(self, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> list[
            sqlite3.Row]:
        conn = await self._free.get()
        try:
            rows = await conn.execute_fetchall(sql, params)
        finally:
            self._free.put_nowait(conn)
        return list(rows)

    async def fetchone(self, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> (
            sqlite3.Row | None):
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def close(self) -> None:
        for conn in self._all:
            await conn.close()
        self._all = []
