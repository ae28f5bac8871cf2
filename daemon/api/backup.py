"""``POST /api/v1/admin/backup``: a consistent copy of this node's database.

The node copies its SQLite file with the online backup API into a temporary
file beside the database (on a worker thread; the writer is not blocked),
checks it, and streams it back as ``application/vnd.sqlite3``. The header
``X-AIM-Backup`` carries, as JSON, what the copy holds: node id,
incarnation, version vector, schema version, op count, size and the time the
copy took (see :mod:`store.backup`). The temporary file is removed once sent.

A backup holds everything the node holds, so it is an operator's request:
when the cluster has a secret the request must be signed with it exactly
like a peer request (``ai-memory backup`` does so with
``AI_MEMORY_CLUSTER_SECRET``); without a secret it is accepted from loopback
only. In keys mode a root key is accepted as well (without key or signature
the request is a 401 before it gets here). One backup runs at a time per
node (409 otherwise).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json

from aiohttp import web

from common import limits
from common.errors import Conflict, Forbidden
from common.policy import KEYS, check
from daemon.http.appkeys import NODE
from daemon.http.auth import NOBODY, principal_of
from daemon.http.errors import error_response
from daemon.lanes.hop import client_cert_member
from daemon.peer.auth import BOOT_HEADER, BootMismatch
from daemon.peer.client import BACKUP_PATH
from daemon.runtime.logs import HEADER as REQUEST_ID_HEADER
from daemon.runtime.logs import request_id
from daemon.runtime.tls import check_peer_member
from daemon.services import backup as svc

BUSY: web.AppKey[asyncio.Lock] = web.AppKey("backup_lock")


def _authorize(request: web.Request, body: bytes) -> None:
    node = request.app[NODE]
    principal = principal_of(request)
    if principal.mode == KEYS and principal is not NOBODY:
        check(principal, "admin.backup")  # a key: root's, or a 403
        return
    if node.settings.cluster.secret:
        checked = node.verifier.verify_headers(request.headers, request.method, request.path,
                                               request.content_length, node.now_ms() / 1000)
        if checked.node in node.settings.cluster.member_ids:  # signed as a member: mutual TLS
            check_peer_member(node.settings, client_cert_member(request), checked.node)
        node.verifier.check_body(checked, body)
        return
    try:
        loopback = ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise Forbidden("backups without a cluster secret are allowed from loopback only")


def _local_port(request: web.Request) -> int | None:
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    return sock[1] if isinstance(sock, tuple) and len(sock) >= 2 else None


async def backup(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    try:
        _authorize(request, body)
    except BootMismatch as exc:  # tell the operator's client the boot id to sign for
        refused = error_response(exc)
        refused.headers[BOOT_HEADER] = request.app[NODE].verifier.boot
        return refused
    node = request.app[NODE]
    server = node.settings.server
    if node.siblings is not None and _local_port(request) == server.port:
        raise Conflict(
            f"this node runs {server.lanes} lanes, each with its own database: back up each "
            f"lane on its own port (lane i: port + {server.lane_port_offset} * (i + 1)); "
            "`ai-memory backup` does so and writes one file per lane")
    lock = request.app[BUSY]
    if lock.locked():
        raise Conflict("a backup of this node is already running")
    async with lock:
        tmp = svc.temporary_path(node)
        try:
            info = await svc.copy_to(node, tmp)
            resp = web.StreamResponse(headers={
                "Content-Type": "application/vnd.sqlite3",
                "Content-Length": str(info.bytes),
                "X-AIM-Backup": json.dumps(info.to_json(), separators=(",", ":")),
                REQUEST_ID_HEADER: request_id.get() or "",
            })
            await resp.prepare(request)
            fh = await asyncio.to_thread(open, tmp, "rb")
            try:
                while chunk := await asyncio.to_thread(fh.read, limits.backup_chunk_bytes):
                    await resp.write(chunk)
            finally:
                fh.close()
            await resp.write_eof()
            return resp
        finally:
            svc.remove_copy(tmp)


def add_routes(app: web.Application) -> None:
    app[BUSY] = asyncio.Lock()
    app.router.add_post(BACKUP_PATH, backup)
