"""Handoffs and the project brief: what ``GET /handoff`` puts before a new session.

* **A handoff** is a note one session leaves for the next session of the same
  project (``POST /handoff``, MCP ``memory_handoff``, ``ai-memory handoff
  write``). It is mail in the project's reserved handoff mailbox
  (:mod:`common.handoffs`), so the mailbox's owner orders it and claims it
  exactly once across the cluster, fenced by epochs, like any message. A new
  handoff retracts the older pending ones (cancelled by the owner, as a
  sender cancels mail), so the next session gets the newest. Text is
  scrubbed of secrets and capped (``limits.handoff_body_max_chars``).
* **``GET /handoff``** (not ``inbox_only``) claims the pending handoff (the
  newest, by its id, under a request id the caller may repeat to get the
  same answer after a lost reply), compiles the brief when asked, and adds
  the count-only inbox notice. Only a named or session-bound project's
  handoff is claimed: one the server inferred may be another project's.
  With nothing pending locally after a read quorum, and no request id to
  answer, no owner is asked (a session start costs no claim round).
* **The brief** (``brief=1``; the hook asks for it when the project's
  ``.ai-memory.toml`` sets ``[briefing] inject_on_session_start = true``):
  the project's pinned, ``_rules/`` and ``_slots/`` pages (:mod:`store.brief`
  says which memories those are), an excerpt of each, then whole bodies in
  that order while the byte budget lasts, then pointers to recently changed
  pages; the text never exceeds the budget (:func:`compile_brief`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from common import limits
from common.errors import BadRequest, Conflict, NotFound
from common.handoffs import box_key, box_project
from common.lanes import mint
from common.lifecycle import PENDING
from common.policy import Principal, check
from common.randomid import token_hex, uuid7
from common.vocab import FROM_AGENT_UNNAMED, NATURE_DEFAULT, message_body
from daemon.ports import MailPorts, MailReads, MemoryReads
from daemon.schemas.timefmt import rfc3339 as iso_ms
from daemon.services import mail, memory_lanes, scrub
from daemon.services.scope import Scope
from federation.requests import MailCancel, MailPop, MailSend
from store import brief as brief_store

HANDOFF_NS = uuid.UUID("0c7b8e4a-5d2f-4a61-9e3b-7f1a2c9d4e58")
EXCERPT_MARK = " […]"
PINNED, RULES, SLOTS = "pinned", "_rules/", "_slots/"


class HandoffReads(MailReads, MemoryReads, Protocol):
    """The mail reads and the memory pool (for :mod:`store.brief`)."""


class HandoffPorts(MailPorts, Protocol):
    @property
    def store(self) -> HandoffReads: ...


# -- write ------------------------------------------------------------------------

async def write(node: HandoffPorts, principal: Principal, *, workspace: str | None,
                project: str | None, session_id: str | None, body: str, subject: str | None,
                from_agent: str | None, owner_user: str | None,
                idempotency_key: str | None) -> dict[str, Any]:
    """Leave a handoff for the next session of the project; older pending ones are retracted."""
    scope = await mail.scope_for(node, workspace, project, session_id, principal)
    mail._refuse_inferred(principal, scope, "leave a handoff for")
    check(principal, "handoff.write", {"box": (scope.workspace, scope.project)})
    if not await mail.project_exists(node, scope.workspace, scope.project):
        raise NotFound(f"unknown project {scope.name}: a project exists once an agent has "
                       "started a session there")
    subject_s, n_subject = scrub.scrub(scrub.one_line(subject or ""))
    body_s, n_body = scrub.scrub(body)
    subject_s, subject_cut = scrub.cap_line(subject_s, limits.message_subject_max_chars)
    body_s, body_cut = scrub.cap(body_s, limits.handoff_body_max_chars)
    if not body_s.strip():
        raise BadRequest("body must not be empty")
    agent = (scope.session or {}).get("harness") or from_agent or FROM_AGENT_UNNAMED
    name = f"{scope.name}:{idempotency_key}"
    hid = mint(box_key(scope.workspace, scope.project), node.settings.server.lanes,
               lambda n: uuid7() if not idempotency_key
               else str(uuid.uuid5(HANDOFF_NS, name if n == 0 else f"{name}#{n}")))
    box = box_project(scope.project)
    op = await node.mailbox(MailSend(
        mailbox=box_key(scope.workspace, scope.project), cap=limits.handoff_pending_max,
        body=message_body(
            id=hid, to_workspace=scope.workspace, to_project=box, to_agent=None,
            from_workspace=scope.workspace, from_project=box, from_agent=agent,
            from_owner_user=owner_user, subject=subject_s or None, body=body_s,
            nature=NATURE_DEFAULT, evidence=None, created_at_ms=node.now_ms(),
            in_reply_to=None, thread_id=hid, approval_required=False, approval_note=None)))
    replaced = await _retract_older(node, scope, hid, int(op.body.get("created_at_ms") or 0))
    return {"handoff_id": hid, "workspace": scope.workspace, "project": scope.project,
            "from_agent": op.body.get("from_agent", agent), "state": PENDING,
            "replaced": replaced, "truncated": {"subject": subject_cut, "body": body_cut},
            "scrubbed": n_subject + n_body}


async def _retract_older(node: HandoffPorts, scope: Scope, hid: str, created_at_ms: int) -> int:
    """Cancel the pending handoffs queued before ``hid`` (one at a time: one
    a session claimed meanwhile stays claimed). Returns how many went."""
    key = box_key(scope.workspace, scope.project)
    box = box_project(scope.project)
    await node.read_barrier(key)
    rows = await node.store.mailbox_pending(scope.workspace, box,
                                            limit=limits.handoff_pending_max)
    ids = [r["id"] for r in rows]
    older = (ids[:ids.index(hid)] if hid in ids else
             [r["id"] for r in rows if int(r.get("created_at_ms") or 0) <= created_at_ms])
    gone = 0
    for mid in older:
        try:
            gone += len(await node.mailbox(MailCancel(
                mailbox=key, message_ids=(mid,), by_workspace=scope.workspace, by_project=box)))
        except (Conflict, NotFound):
            continue  # claimed (or not yet at the owner): nothing to retract
    return gone


# -- claim --------------------------------------------------------------------------

async def claim(node: HandoffPorts, scope: Scope, *, harness: str | None,
                request_id: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """Claim the project's newest pending handoff, once across the cluster.
    Returns (the handoff or None, the request id the claim was decided under)."""
    if not await mail.project_exists(node, scope.workspace, scope.project):
        return None, request_id
    key = box_key(scope.workspace, scope.project)
    rid = request_id
    claimer = {"claimer_session": (scope.session or {}).get("session_id"),
               "claimer_agent": harness}
    result = None
    for _attempt in range(2):
        await node.read_barrier(key)
        rows = await node.store.mailbox_pending(scope.workspace, box_project(scope.project),
                                                limit=limits.handoff_pending_max)
        if not rows and rid is None:
            return None, None
        rid = rid or f"handoff-{token_hex(16)}"
        try:
            # The newest by its id; a repeated request id is answered with its
            # earlier decision before the id is looked at (docs/federation.md).
            result = await node.mailbox(MailPop(
                mailbox=key, request_id=rid, message_id=rows[-1]["id"] if rows else None,
                agent=harness, claimer=claimer))
            break
        except (Conflict, NotFound):
            # Taken by another session, or retracted by a newer handoff: a
            # refusal decides nothing for this request id, so look once more.
            continue
    if result is None:
        return None, rid
    msg, decided = result["message"], result["claim"]
    return {
        "id": msg["id"], "subject": msg.get("subject"), "body": msg.get("body"),
        "from_agent": msg.get("from_agent"), "from_owner_user": msg.get("from_owner_user"),
        "created_at": iso_ms(msg.get("created_at_ms")),
        "claimed_at": iso_ms(decided.get("at_ms")),
        "request_id": decided.get("request_id"),
    }, rid


# -- the brief ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Page:
    id: str
    section: str  # PINNED, RULES or SLOTS
    path: str
    body: str


@dataclass(frozen=True, slots=True)
class Pointer:
    id: str
    path: str
    updated_at: str | None


def _utf8(text: str) -> int:
    return len(text.encode())


def excerpt(body: str, max_bytes: int) -> str:
    """``body`` cut to at most ``max_bytes`` UTF-8 bytes (on a character), marked when cut."""
    if _utf8(body) <= max_bytes:
        return body
    cut = body.encode()[:max(0, max_bytes - _utf8(EXCERPT_MARK))].decode(errors="ignore")
    return cut.rstrip() + EXCERPT_MARK


def _entry(page: Page, text: str) -> str:
    return f"\n## {page.section.rstrip('/')}: {page.path}\n{text}\n"


def _pointer(p: Pointer) -> str:
    return f"- {p.path} (memory {p.id}, {p.updated_at})\n"


def compile_brief(name: str, pages: list[Page], recent: list[Pointer], budget: int) -> dict[str, Any]:
    """The brief's text within ``budget`` UTF-8 bytes: the header; an excerpt
    of every page that fits, in order; whole bodies in that order until the
    next one would not fit; then pointers to recent pages not shown (at
    most ``limits.brief_recent_max``), while they fit."""
    header = f"# Project brief: {name}\n"
    used = _utf8(header)
    if used > budget:
        return {"text": "", "bytes": 0, "budget_bytes": budget, "pages": [],
                "omitted": [_page_ref(p) for p in pages], "recent": []}
    shown: list[Page] = []
    texts: dict[str, str] = {}
    for page in pages:
        short = excerpt(page.body, limits.brief_excerpt_bytes)
        cost = _utf8(_entry(page, short))
        if used + cost <= budget:
            shown.append(page)
            texts[page.id] = short
            used += cost
    for page in shown:
        if texts[page.id] == page.body:
            continue
        extra = _utf8(_entry(page, page.body)) - _utf8(_entry(page, texts[page.id]))
        if used + extra > budget:
            break
        texts[page.id] = page.body
        used += extra
    seen = {p.id for p in shown}
    pointers: list[Pointer] = []
    title = "\nRecent pages:\n"
    for p in recent:
        if p.id in seen:
            continue
        if len(pointers) == limits.brief_recent_max:
            break
        cost = _utf8(_pointer(p)) + (0 if pointers else _utf8(title))
        if used + cost > budget:
            break
        pointers.append(p)
        used += cost
    text = header + "".join(_entry(p, texts[p.id]) for p in shown)
    if pointers:
        text += title + "".join(_pointer(p) for p in pointers)
    return {
        "text": text, "bytes": _utf8(text), "budget_bytes": budget,
        "pages": [{**_page_ref(p), "whole": texts[p.id] == p.body} for p in shown],
        "omitted": [_page_ref(p) for p in pages if p.id not in seen],
        "recent": [{"id": p.id, "path": p.path, "updated_at": p.updated_at} for p in pointers],
    }


def _page_ref(page: Page) -> dict[str, Any]:
    return {"id": page.id, "path": page.path, "section": page.section.rstrip("/")}


def _section(path: str, tags: list[str]) -> str:
    if brief_store.PINNED_TAG in tags:
        return PINNED
    return RULES if path.startswith(RULES) else SLOTS


async def brief(node: HandoffPorts, scope: Scope, budget: int) -> dict[str, Any]:
    """The project brief of ``scope`` (pinned, then ``_rules/``, then ``_slots/``),
    from the memories of every lane."""
    ws, proj, now = scope.workspace, scope.project, node.now_ms()
    answers = await memory_lanes.every_lane(node, "brief", {
        "workspace": ws, "project": proj, "now": now, "pages": limits.brief_pages_max,
        "recent": limits.brief_recent_max + limits.brief_pages_max})
    # the query's order on each lane, merged: priority, then newest, then id
    rows = sorted((r for a in answers for r in a["pages"]),
                  key=lambda r: (-int(r["priority"]), -int(r["updated_at_ms"]), str(r["id"])))
    rows = rows[:limits.brief_pages_max]
    order = {PINNED: 0, RULES: 1, SLOTS: 2}
    pages = [Page(str(r["id"]), _section(path, list(r.get("tags") or ())), path,
                  str(r.get("content") or ""))
             for r in rows for path in [brief_store.page_path(r, ws, proj)]]
    # pinned: priority, then newest (the query's order); rules and slots by path
    pages.sort(key=lambda p: (order[p.section], p.path if p.section != PINNED else ""))
    recent_rows = sorted((r for a in answers for r in a["recent"]),
                         key=lambda r: (int(r["updated_at_ms"]), str(r["id"])), reverse=True)
    recent_rows = recent_rows[:limits.brief_recent_max + len(pages)]
    recent = [Pointer(str(r["id"]), brief_store.page_path(r, ws, proj),
                      iso_ms(r.get("updated_at_ms"))) for r in recent_rows]
    return compile_brief(scope.name, pages, recent, budget)


# -- GET /handoff ---------------------------------------------------------------------

async def session_start(node: HandoffPorts, principal: Principal, *, workspace: str | None,
                        project: str | None, session_id: str | None, harness: str | None,
                        take_handoff: bool, with_brief: bool, budget: int | None,
                        request_id: str | None) -> dict[str, Any]:
    """``GET /handoff`` without ``inbox_only``: the handoff, the brief, the notice,
    and ``context``, the block a hook puts before the new session."""
    scope = await mail.scope_for(node, workspace, project, session_id, principal)
    mail._check_scope(principal, "handoff.read", scope)
    out = await mail.notice_for(node, scope, harness, principal.agent)
    handoff: dict[str, Any] | None = None
    if take_handoff and scope.inferred:
        out["handoff_hint"] = ("no handoff was claimed: " + scope.hint())
    elif take_handoff:
        handoff, rid = await claim(node, scope, harness=out["harness"], request_id=request_id)
        if rid is not None:
            out["request_id"] = rid
    out["handoff"] = handoff
    out["brief"] = (await brief(node, scope, budget or limits.brief_budget_bytes_default)
                    if with_brief else None)
    out["context"] = context(handoff, out["brief"], out["notice"]) or None
    return out


def context(handoff: dict[str, Any] | None, brief_out: dict[str, Any] | None,
            notice: str | None) -> str:
    """The on-start block: the handoff, then the brief, then the inbox notice."""
    parts: list[str] = []
    if handoff is not None:
        by = handoff.get("from_agent") or FROM_AGENT_UNNAMED
        head = f"# Handoff from the previous session ({by}, {handoff.get('created_at')})\n"
        subject = f"{handoff['subject']}\n\n" if handoff.get("subject") else ""
        parts.append(f"{head}{subject}{handoff.get('body') or ''}\n")
    if brief_out is not None and brief_out.get("text"):
        parts.append(str(brief_out["text"]))
    if notice:
        parts.append(notice + "\n")
    return "\n".join(parts)
