"""Purging a project or a workspace, and the cleanup of empty projects (issue 27).

What a purge removes, on every member:

* **messages**: every message addressed to the project (its mailbox), in
  any state, sent before the purge. The mailbox's owner decides it like a
  claim (``federation.requests.MailPurge``): it waits until no round of the
  mailbox is in flight, stamps a ``msg.purge`` op at its epoch and answers
  once a majority holds it. Every send it serves afterwards ranks above the
  purge and stays; a copy of an older send that arrives later, by
  anti-entropy or from a deposed owner, is dropped on arrival. No claim of
  a purged message is acknowledged after the purge is (docs/federation.md,
  "Purges"). Messages the project sent to other projects stay in those
  mailboxes: they belong to their recipients' queues.
* **sessions**: the project's sessions and harness rows last active before
  the purge are hidden from every read, so the project no longer exists
  (sends to it fail closed) until a session starts there again.
* **memories**: those in the namespace ``<workspace>/<project>`` or below it
  (``<workspace>`` for a workspace purge), deleted with the ordinary
  ``mem.del`` tombstones (at most ``limits.purge_memories_max`` per call; the
  answer says when more are left). The audit namespace is never touched.

Each purge leaves an audit record: a memory in namespace
:data:`AUDIT_NAMESPACE` (who, what, when, why, how much), replicated like
any other. A retry with the same ``Idempotency-Key`` is the same purge
(same id, same audit record) and removes nothing sent since.

The cleanup of empty projects removes only the project record (sessions
and harness rows) of a project that is idle and *empty*: no message, in any
state, names it as recipient or sender. It never removes a message; the
owner re-checks the mailbox at the moment it decides (``only_if_empty``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from typing import Any

from common import limits
from common.errors import NotFound, PayloadTooLarge
from common.lanes import lane_of
from common.ops import ALL_KEYS, MEM_DEL, MEM_PUT, PROJ_HIDE, mailbox_key, mem_key, project_key
from common.policy import Principal, check
from common.randomid import uuid7
from daemon.ports import PurgePorts
from daemon.services import memory_lanes
from federation.requests import MailPurge

log = logging.getLogger(__name__)

PURGE_NS = uuid.UUID("1c0f6a52-39d4-4d8e-b7a1-0e2b5c9d7f31")
AUDIT_NAMESPACE = "_audit/purge"
PROJECT, WORKSPACE, CLEANUP = "project", "workspace", "cleanup"


def purge_id(scope: str, user: str | None, target: str, idempotency_key: str | None) -> str:
    """A new id, or the same one for a retry with the same key."""
    if idempotency_key is None:
        return uuid7()
    return str(uuid.uuid5(PURGE_NS, f"{scope}:{user or ''}:{target}:{idempotency_key}"))


# -- lanes (docs/lanes.md): a purge runs on the home lane; the memories it
# tombstones and its audit memory are on the lanes their ids name (every lane
# is asked for its own); a mailbox is on its project's lane, asked over the
# local link; the hiding of the project goes to every lane (proj.hide).
def _siblings(node: PurgePorts) -> Any:
    return getattr(node, "siblings", None)


def _mailbox_lane(node: PurgePorts, workspace: str, project: str) -> int | None:
    """The lane of the project's mailbox when it is another lane's, else None."""
    siblings = _siblings(node)
    if siblings is None:
        return None
    lane = lane_of(mailbox_key(workspace, project), siblings.lanes)
    return None if lane == siblings.lane else lane


async def mailbox_projects(node: PurgePorts, workspace: str, project: str | None) -> list[str]:
    """Projects of ``workspace`` (only ``project``, when given) whose mailbox
    this lane holds a message or a purge mark of, after a read of them."""
    if project is None:
        await node.read_barrier(ALL_KEYS)
    else:
        await node.read_barrier(mailbox_key(workspace, project))
    found = await node.store.mailbox_projects(workspace)
    return found if project is None else [p for p in found if p == project]


async def _mailbox_projects(node: PurgePorts, workspace: str,
                            project: str | None = None) -> set[str]:
    """:func:`mailbox_projects` of the lanes that hold the mailboxes asked of."""
    siblings = _siblings(node)
    if siblings is None:
        return set(await mailbox_projects(node, workspace, project))
    if project is not None:
        lane = _mailbox_lane(node, workspace, project)
        if lane is None:
            return set(await mailbox_projects(node, workspace, project))
        return set(await siblings.call(lane, "purge_scan", [workspace, project]))
    found = set(await mailbox_projects(node, workspace, None))
    for lane in siblings.others:
        found |= set(await siblings.call(lane, "purge_scan", [workspace, None]))
    return found


async def sent_from(node: PurgePorts, projects: list[tuple[str, str]]) -> list[list[str]]:
    """Those of ``projects`` that sent a message this lane holds."""
    await node.read_barrier(ALL_KEYS)
    return [[ws, p] for ws, p in projects if await node.store.sent_messages(ws, p, limit=1)]


async def _hide(node: PurgePorts, pid: str, workspace: str, project: str, at_ms: int) -> None:
    """With lanes: hide the purged project's sessions on every lane (the
    ``msg.purge`` that hides them is on the mailbox's lane only)."""
    if _siblings(node) is not None:
        await node.write([(PROJ_HIDE, project_key(workspace, project),
                           {"id": pid, "workspace": workspace, "project": project,
                            "at_ms": at_ms})])


async def _known(node: PurgePorts, workspace: str, project: str) -> bool:
    if await node.store.project_exists(workspace, project):
        return True
    return project in await _mailbox_projects(node, workspace, project)


async def _purge_mailbox(node: PurgePorts, principal: Principal | None, workspace: str,
                         project: str, pid: str, scope: str, reason: str | None,
                         only_if_empty: bool = False,
                         hide_before_ms: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": pid, "workspace": workspace, "project": project,
                            "scope": scope, "reason": reason,
                            "by_user": None if principal is None else principal.user}
    if hide_before_ms is not None:
        body["at_ms"] = hide_before_ms
    res: dict[str, Any] = await node.mailbox(
        MailPurge(mailbox_key(workspace, project), body, only_if_empty=only_if_empty))
    return res


async def _delete_memories(node: PurgePorts, namespace: str) -> tuple[int, bool]:
    """Tombstone the memories under ``namespace``; (how many, more left?)."""
    found = await memory_lanes.every_lane(node, "under", {  # (this lane passed its barrier)
        "namespace": namespace, "limit": limits.purge_memories_max + 1,
        "barrier": node.settings.server.lanes > 1})
    ids = sorted(i for lane in found for i in lane)
    more = len(ids) > limits.purge_memories_max
    ids = ids[:limits.purge_memories_max]
    step = limits.bulk_create_max
    for i in range(0, len(ids), step):
        await node.write([(MEM_DEL, mem_key(m), {"id": m}) for m in ids[i:i + step]])
    return len(ids), more


async def _audit(node: PurgePorts, principal: Principal, pid: str,
                 record: dict[str, Any]) -> str:
    """Write the purge's audit memory once (a retry finds it and keeps it)."""
    audit_id = str(uuid.uuid5(PURGE_NS, f"audit:{pid}"))
    if await memory_lanes.rows(node, [audit_id], now_ms=node.now_ms()):
        return audit_id
    now = node.now_ms()
    target = record["workspace"] + ("" if record.get("project") is None
                                    else f"/{record['project']}")
    body = {
        "id": audit_id, "title": f"{record['scope']} purge of {target}",
        "content": json.dumps(record, sort_keys=True), "tier": "long",
        "namespace": AUDIT_NAMESPACE, "tags": ["audit", "purge"], "priority": 5,
        "confidence": 1.0, "source": "audit", "metadata": {"purge": record},
        "agent_id": principal.agent, "created_at_ms": now, "updated_at_ms": now,
        "expires_at_ms": None,
    }
    await node.write([(MEM_PUT, mem_key(audit_id), body)])
    return audit_id


def _answer(pid: str, scope: str, workspace: str, project: str | None, removed: int | None,
            memories: int, more: bool, audit_id: str, projects: list[str]) -> dict[str, Any]:
    return {"purge_id": pid, "scope": scope, "workspace": workspace, "project": project,
            "projects": projects, "messages_removed": removed, "memories_removed": memories,
            "memories_left": more, "audit_id": audit_id}


async def purge_project(node: PurgePorts, principal: Principal, *, workspace: str, project: str,
                        reason: str | None, idempotency_key: str | None) -> dict[str, Any]:
    check(principal, "project.purge", {"box": (workspace, project)})
    await node.read_barrier(project_key(workspace, project))
    if not await _known(node, workspace, project):
        raise NotFound(f"no project {workspace}/{project}", workspace=workspace, project=project)
    pid = purge_id(PROJECT, principal.user, f"{workspace}/{project}", idempotency_key)
    res = await _purge_mailbox(node, principal, workspace, project, pid, PROJECT, reason)
    await _hide(node, pid, workspace, project, int(res["purge"]["at_ms"]))
    memories, more = await _delete_memories(node, f"{workspace}/{project}")
    record = {"purge_id": pid, "scope": PROJECT, "workspace": workspace, "project": project,
              "by_user": principal.user, "by_agent": principal.agent, "reason": reason,
              "at_ms": res["purge"]["at_ms"], "messages_removed": res.get("removed"),
              "memories_removed": memories}
    audit_id = await _audit(node, principal, pid, record)
    return _answer(pid, PROJECT, workspace, project, res.get("removed"), memories, more,
                   audit_id, [project])


async def purge_workspace(node: PurgePorts, principal: Principal, *, workspace: str,
                          reason: str | None, idempotency_key: str | None) -> dict[str, Any]:
    check(principal, "workspace.purge")
    await node.read_barrier(ALL_KEYS)
    projects = sorted({p["project"] for p in await node.store.list_projects()
                       if p["workspace"] == workspace}
                      | await _mailbox_projects(node, workspace))
    if not projects:
        raise NotFound(f"no project in workspace {workspace}", workspace=workspace)
    if len(projects) > limits.purge_projects_max:
        raise PayloadTooLarge(
            f"workspace {workspace} has {len(projects)} projects, more than one purge takes "
            "(limits.purge_projects_max); purge some projects first",
            limit="purge_projects_max", cap=limits.purge_projects_max)
    pid = purge_id(WORKSPACE, principal.user, workspace, idempotency_key)
    removed: int | None = 0
    at_ms = 0
    for project in projects:
        sub = str(uuid.uuid5(PURGE_NS, f"{pid}:{project}"))
        res = await _purge_mailbox(node, principal, workspace, project, sub, WORKSPACE, reason)
        at_ms = max(at_ms, int(res["purge"]["at_ms"]))
        await _hide(node, sub, workspace, project, int(res["purge"]["at_ms"]))
        got = res.get("removed")
        removed = None if removed is None or got is None else removed + int(got)
    memories, more = await _delete_memories(node, workspace)
    record = {"purge_id": pid, "scope": WORKSPACE, "workspace": workspace, "project": None,
              "projects": projects, "by_user": principal.user, "by_agent": principal.agent,
              "reason": reason, "at_ms": at_ms, "messages_removed": removed,
              "memories_removed": memories}
    audit_id = await _audit(node, principal, pid, record)
    return _answer(pid, WORKSPACE, workspace, None, removed, memories, more, audit_id, projects)


# -- the scheduled cleanup of empty projects ----------------------------------------

async def empty_projects(node: PurgePorts, *, idle_before_ms: int) -> list[tuple[str, str]]:
    """Projects last active before ``idle_before_ms`` that no message names,
    as recipient or sender, in any state (after a read of every key). With
    lanes, only the projects whose mailbox this lane holds, and none that
    sent a message another lane holds."""
    await node.read_barrier(ALL_KEYS)
    out = []
    for p in await node.store.list_projects():
        ws, proj = p["workspace"], p["project"]
        if p["last_active_at_ms"] >= idle_before_ms:
            continue
        if _siblings(node) is not None and _mailbox_lane(node, ws, proj) is not None:
            continue  # another lane's to judge
        if await node.store.mailbox_messages(ws, proj, limit=1):
            continue
        if await node.store.sent_messages(ws, proj, limit=1):
            continue
        out.append((ws, proj))
    siblings = _siblings(node)
    if siblings is not None and out:
        for lane in siblings.others:
            sent = await siblings.call(lane, "purge_sent", [list(p) for p in out])
            out = [p for p in out if list(p) not in sent]
    return out


async def cleanup_empty_projects(node: PurgePorts, *, idle_before_ms: int,
                                 by: Principal | None = None) -> dict[str, Any]:
    """Remove the project record of every empty, idle project (see the
    module docstring); the owner of each mailbox re-checks it is empty."""
    removed: list[str] = []
    kept: list[str] = []
    for ws, proj in (await empty_projects(node, idle_before_ms=idle_before_ms))[
            :limits.purge_projects_max]:
        pid = str(uuid.uuid5(PURGE_NS, f"cleanup:{ws}/{proj}:{idle_before_ms}"))
        res = await _purge_mailbox(node, by, ws, proj, pid, CLEANUP,
                                   "scheduled cleanup of an empty project", only_if_empty=True,
                                   hide_before_ms=idle_before_ms)
        if res.get("purge") is not None:
            await _hide(node, pid, ws, proj, idle_before_ms)
        (removed if res.get("purge") is not None else kept).append(f"{ws}/{proj}")
    return {"removed": removed, "kept": kept, "idle_before_ms": idle_before_ms}


async def cleanup_loop(node: PurgePorts) -> None:
    """Every ``limits.empty_project_cleanup_interval_secs`` (the first time at
    a random point of the first interval, so members do not go together),
    remove the empty projects idle for ``limits.empty_project_idle_secs``.
    Every member runs it; a project one member removed is gone from the
    others' lists, and the owner's ``only_if_empty`` check makes a second
    removal of the same project change nothing that a message needs."""
    interval = limits.empty_project_cleanup_interval_secs
    await asyncio.sleep(random.random() * interval)
    while True:
        try:
            idle_before = node.now_ms() - limits.empty_project_idle_secs * 1000
            done = await cleanup_empty_projects(node, idle_before_ms=idle_before)
            if done["removed"]:
                log.info("removed empty projects %s", ", ".join(done["removed"]))
        except Exception:
            log.exception("cleanup of empty projects failed")
        await asyncio.sleep(interval)
