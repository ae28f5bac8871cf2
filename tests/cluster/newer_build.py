"""A test-only "newer version" of the daemon: this code plus one op kind.

Run as a script in place of ``python -m cli serve``. It registers ``widget.put``
(a replicated link record, last writer wins on (hlc, origin)) with its apply
rule, serves ``POST /api/v1/test/links`` to write one, and speaks the same
peer protocol otherwise, so a test can run it beside unmodified nodes and
upgrade a cluster node by node.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from aiohttp import web

LINK_PUT = "widget.put"
LINKS_TABLE = ("CREATE TABLE IF NOT EXISTS test_widgets (id TEXT PRIMARY KEY, src TEXT NOT NULL,"
               " dst TEXT NOT NULL, hlc INTEGER NOT NULL, origin TEXT NOT NULL)")


def apply_link(conn: sqlite3.Connection, op: Any, now_ms: int) -> None:
    conn.execute(LINKS_TABLE)
    conn.execute(
        "INSERT INTO test_widgets (id, src, dst, hlc, origin) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET src = excluded.src, dst = excluded.dst,"
        " hlc = excluded.hlc, origin = excluded.origin"
        " WHERE excluded.hlc > test_widgets.hlc OR (excluded.hlc = test_widgets.hlc"
        " AND excluded.origin > test_widgets.origin)",
        (op.body["id"], op.body["src"], op.body["dst"], op.hlc, op.origin))


class _Routes:
    @staticmethod
    def add_routes(app: web.Application) -> None:
        from daemon.http.appkeys import NODE

        async def put_link(request: web.Request) -> web.Response:
            body = await request.json()
            await request.app[NODE].write([(LINK_PUT, f"widget:{body['id']}", {
                "id": str(body["id"]), "src": str(body["src"]), "dst": str(body["dst"])})])
            return web.json_response({"id": body["id"]}, status=201)

        app.router.add_post("/api/v1/test/links", put_link)


def main() -> None:
    from daemon import api
    from store import apply

    apply.register(LINK_PUT, apply_link)
    api.ROUTE_MODULES.append(_Routes)
    from cli.serve import serve

    serve(prog_name="newer_build")


if __name__ == "__main__":
    main()
