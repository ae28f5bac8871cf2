"""Who may do what: the one table of actions and the grants they need.

A request is made by a :class:`Principal`: the user behind its key (or
nobody, in anonymous mode), whether that user is root, the agent the key is
bound to, and the user's project grants. Every entry point (HTTP, MCP, the
web inbox) resolves the principal once and asks :func:`check` before it acts;
nothing else decides access.

Grants are per project: ``read`` lets a user list a project's mail, its
handoff and briefing; ``write`` (which implies read) lets them send from it,
send to it, pop it, cancel its outbox, edit its mail and leave a handoff. A grant without a
project covers every project of its workspace. Root needs no grants.

In anonymous mode identity is only claimed (``X-Agent-Id``) and grants are
not checked: :func:`check` allows every project action, and the callers
still insist on a named agent or project (no header, no read).

The table below, :data:`ACTIONS`, maps each action to the grants it needs,
by role: the project the request acts on (``box``), the sender's project of
a send or an edit (``from``), the recipient project of a send (``to``).
:data:`ROOT_ONLY` actions need a root key in keys mode.
:data:`WORKSPACE_WIDE` actions need a grant on the whole workspace of the
project they act on (a grant without a project), or root: purging a project
(issue 27) destroys mail other users sent and received there, which a grant
on that one project does not cover. :data:`AUTHOR_ONLY`
actions act on one record someone made (a memory, a webhook subscription):
in keys mode only root, or a key bound to the agent that made it, may take
them (:func:`check_author`); an unbound key may not, since its agent is only
the one it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from common.errors import Forbidden

Access = Literal["read", "write"]
Mode = Literal["anonymous", "keys"]
Role = Literal["box", "from", "to"]
Coord = tuple[str, str]  # (workspace, project)

READ: Final = "read"
WRITE: Final = "write"
ANONYMOUS: Final = "anonymous"
KEYS: Final = "keys"

# action -> the grants it needs, each (role of the project, access)
ACTIONS: Final[Mapping[str, tuple[tuple[Role, Access], ...]]] = {
    "message.send": (("to", "write"), ("from", "write")),
    "message.list_inbox": (("box", "read"),),
    "message.list_outbox": (("box", "read"),),
    "message.pop": (("box", "write"),),
    "message.cancel": (("from", "write"),),
    "message.edit": (("box", "write"), ("from", "write")),
    "message.complete": (("box", "write"),),  # and only by the claim's holder

    "message.approve": (("box", "write"),),
    "handoff.read": (("box", "read"),),
    "handoff.write": (("box", "write"),),
    "briefing.read": (("box", "read"),),
    "session.start": (("box", "write"),),
    "project.read": (("box", "read"),),
}

# Actions only root may take in keys mode: identity administration, backups,
# the upstream sync endpoints (peers use their own signature instead).
# The SDK's bulk deletes and rewrites (forget by filter, garbage collection,
# import) act on memories of every author, so they are root's too.
ROOT_ONLY: Final = frozenset({
    "admin.users", "admin.keys", "admin.grants", "admin.backup", "sync.push", "sync.since",
    "memory.forget", "memory.import", "admin.gc", "workspace.purge",
})

# Actions on a project that need ``access`` on its whole workspace (a grant
# with no project), or root.
WORKSPACE_WIDE: Final[Mapping[str, Access]] = {"project.purge": WRITE}

# Actions on a record that only its author (the agent a key is bound to) or
# root may take in keys mode.
AUTHOR_ONLY: Final = frozenset({"memory.update", "memory.delete", "subscription.delete",
                                 "subscription.replay"})


@dataclass(frozen=True, slots=True)
class ProjectGrant:
    """``access`` on one project of ``workspace``, or on all of them (project None)."""

    workspace: str
    project: str | None
    access: Access

    def covers(self, workspace: str, project: str, need: Access) -> bool:
        if self.workspace != workspace or self.project not in (None, project):
            return False
        return need == READ or self.access == WRITE


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request, as resolved from its key (or its claim)."""

    mode: Mode
    user: str | None = None        # the key's user; None in anonymous mode
    root: bool = False
    agent: str | None = None       # the agent a key is bound to (fixed), or the claimed one
    agent_bound: bool = False      # True: the key fixes the agent; a differing claim is a 403
    key_id: str | None = None
    grants: tuple[ProjectGrant, ...] = ()
    owner_user: str = ""           # what ``from_owner_user`` reports for this caller

    @classmethod
    def anonymous(cls, agent: str | None = None) -> Principal:
        return cls(mode=ANONYMOUS, agent=agent)

    def may(self, workspace: str, project: str, need: Access) -> bool:
        if self.mode == ANONYMOUS or self.root:
            return True
        return any(g.covers(workspace, project, need) for g in self.grants)

    def may_root(self) -> bool:
        return self.mode == ANONYMOUS or self.root

    def may_workspace(self, workspace: str, need: Access) -> bool:
        """``need`` on every project of ``workspace``: root, or a grant with no project."""
        if self.mode == ANONYMOUS or self.root:
            return True
        return any(g.project is None and g.covers(workspace, "", need) for g in self.grants)


def check(principal: Principal, action: str, coords: Mapping[Role, Coord] | None = None) -> None:
    """Raise :class:`Forbidden` unless ``principal`` may take ``action``.

    ``coords`` names the project of every role the action's row mentions; a
    missing role is a programming error, not a refusal.
    """
    if action in ROOT_ONLY:
        if not principal.may_root():
            raise Forbidden(f"{action} needs a root key")
        return
    if action in WORKSPACE_WIDE:
        workspace = (coords or {})["box"][0]
        access = WORKSPACE_WIDE[action]
        if not principal.may_workspace(workspace, access):
            raise Forbidden(f"{action} needs {access} on all of workspace {workspace} "
                            "(a grant without a project) or root",
                            workspace=workspace, access=access)
        return
    needs = ACTIONS.get(action)
    if needs is None:
        raise KeyError(f"unknown action {action!r}")
    given = coords or {}
    for role, access in needs:
        workspace, project = given[role]
        if not principal.may(workspace, project, access):
            raise Forbidden(
                f"{action} needs {access} on {workspace}/{project}",
                workspace=workspace, project=project, access=access)


def check_author(principal: Principal, author: str | None, action: str) -> None:
    """Raise :class:`Forbidden` unless ``principal`` may take ``action`` on a
    record ``author`` made (see :data:`AUTHOR_ONLY`)."""
    if action not in AUTHOR_ONLY:
        raise KeyError(f"unknown author-only action {action!r}")
    if principal.may_root():
        return
    if principal.agent_bound and author is not None and principal.agent == author:
        return
    raise Forbidden(f"{action}: only the agent that made it ({author or 'nobody'}) or root may",
                    author=author)


class Directory(Protocol):
    """Where keys are resolved: the replicated users, keys and grants."""

    async def resolve(self, secret: str) -> Principal | None:
        """The principal of a presented key; None if unknown, revoked or removed."""
        ...
