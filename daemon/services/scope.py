"""Which project a mail call acts for, and how that was decided.

Order: explicit workspace/project in the call; else the caller's session
(``x-memory-actor-session-id``) if the server knows it; else an *inferred*
scope: the project that was active last (``shared_slot``), the daemon's
configured default project (``startup_seed``), or ``default/default``
(``default``; ``default_after_mismatch`` when the caller named a session the
server does not know). Send, pop and cancel refuse an inferred scope and
change nothing; list answers it but says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.errors import BadRequest, Conflict
from common.vocab import INFERRED_SOURCES, ScopeSource
from daemon.ports import SessionReads
from daemon.settings import MailSettings

EXPLICIT: ScopeSource = "explicit"
SESSION: ScopeSource = "session"
INFERRED = INFERRED_SOURCES


@dataclass(frozen=True, slots=True)
class Scope:
    workspace: str
    project: str
    source: ScopeSource
    session: dict[str, Any] | None = None  # the caller's session row, when it belongs to this scope

    @property
    def inferred(self) -> bool:
        return self.source in INFERRED

    @property
    def name(self) -> str:
        return f"{self.workspace}/{self.project}"

    def hint(self) -> str:
        return (f"this call resolved {self.name} by {self.source}, not by name; pass workspace and "
                "project (the SessionStart inbox notice and the briefing name them)")


async def resolve(store: SessionReads, settings: MailSettings, workspace: str | None,
                  project: str | None, session_id: str | None) -> Scope:
    session = await store.get_session(session_id) if session_id else None
    if workspace is not None or project is not None:
        if not workspace or not project:
            raise BadRequest("give both workspace and project, or neither")
        own = session if session and (session["workspace"], session["project"]) == (
            workspace, project) else None
        return Scope(workspace, project, EXPLICIT, own)
    if session is not None:
        return Scope(session["workspace"], session["project"], SESSION, session)
    if session_id:
        return Scope(settings.default_workspace, settings.default_project or "default",
                     "default_after_mismatch")
    last = await store.last_active_project()
    if last is not None:
        return Scope(last[0], last[1], "shared_slot")
    if settings.default_project:
        return Scope(settings.default_workspace, settings.default_project, "startup_seed")
    return Scope(settings.default_workspace, "default", "default")


def refuse_inferred(scope: Scope, verb: str) -> None:
    if scope.inferred:
        raise Conflict(
            f"refusing to {verb} {scope.name}: it was resolved by {scope.source}, not named, so it "
            "may not be the project you are working in. Pass workspace and project (the "
            "SessionStart inbox notice and memory_briefing name them).",
            resolved_scope={"workspace": scope.workspace, "project": scope.project},
            scope_source=scope.source,
        )
