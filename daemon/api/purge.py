"""The purge and cleanup operations (issue 27; :mod:`daemon.services.purge`).

``POST /projects/{workspace}/{project}/purge`` (or ``DELETE`` on the
project) and ``POST /workspaces/{workspace}/purge`` (or ``DELETE``) take an
optional ``{"reason"}``; ``Idempotency-Key`` makes a retry the same purge.
``POST /projects/cleanup`` runs the scheduled cleanup of empty projects now
(root)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from common.policy import check
from daemon.api.call import ApiCall, Route, serve
from daemon.schemas.purge import CleanupIn, ProjectPath, PurgeIn, WorkspacePath
from daemon.schemas.validation import validate
from daemon.services import purge


async def _reason(c: ApiCall) -> str | None:
    """The optional ``{"reason"}`` body (no body at all: no reason)."""
    if not c.request.body_exists:
        return None
    return (await c.body(PurgeIn)).reason


async def purge_project(c: ApiCall) -> Any:
    where = validate(ProjectPath, dict(c.path))
    return await purge.purge_project(
        c.node, c.principal, workspace=where.workspace, project=where.project,
        reason=await _reason(c), idempotency_key=c.idempotency_key)


async def purge_workspace(c: ApiCall) -> Any:
    where = validate(WorkspacePath, dict(c.path))
    return await purge.purge_workspace(
        c.node, c.principal, workspace=where.workspace, reason=await _reason(c),
        idempotency_key=c.idempotency_key)


async def cleanup(c: ApiCall) -> Any:
    check(c.principal, "admin.gc")
    req = await c.body(CleanupIn) if c.request.body_exists else CleanupIn()
    return await purge.cleanup_empty_projects(
        c.node, idle_before_ms=c.node.now_ms() - req.idle_secs * 1000, by=c.principal)


OPERATIONS = [
    Route("POST", "/api/v1/projects/cleanup", cleanup),
    Route("POST", "/api/v1/projects/{workspace}/{project}/purge", purge_project),
    Route("DELETE", "/api/v1/projects/{workspace}/{project}", purge_project),
    Route("POST", "/api/v1/workspaces/{workspace}/purge", purge_workspace),
    Route("DELETE", "/api/v1/workspaces/{workspace}", purge_workspace),
]


def add_routes(app: web.Application) -> None:
    serve(app, OPERATIONS)
