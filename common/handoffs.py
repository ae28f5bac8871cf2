"""Where a project's handoffs live: a reserved mailbox beside its inbox.

A handoff (what one session leaves for the next session of the same
project) is claimed once, across the cluster, exactly like project mail.
Rather than a second protocol it *is* mail: a ``msg.send`` to the reserved
mailbox ``<workspace>/<project>#handoff``, ordered and claimed by that
mailbox's owner with the same epochs, accept rounds and request ids
(docs/federation.md, "Mailboxes and claim-once").

``#`` is outside the scope-name alphabet (``daemon.schemas.validation.SCOPE_RE``), so
no client can name the reserved mailbox as a project: mail cannot be sent
to it, listed from it or popped from it, and the project's own inbox,
outbox, counts, push streams and web history never show a handoff (they
match the project name exactly). A handoff's sender is the reserved mailbox
too, so ``message cancel --all`` of the project leaves it alone.
"""

from __future__ import annotations

from typing import Final

from common.ops import mailbox_key

SUFFIX: Final = "#handoff"


def box_project(project: str) -> str:
    """The reserved mailbox's project name for ``project``."""
    return project + SUFFIX


def box_key(workspace: str, project: str) -> str:
    """The mailbox key of ``workspace/project``'s handoffs."""
    return mailbox_key(workspace, box_project(project))


def is_box_key(key: str) -> bool:
    """Whether an op key names a handoff mailbox (not a project's inbox)."""
    return key.startswith("mbox:") and key.endswith(SUFFIX)
