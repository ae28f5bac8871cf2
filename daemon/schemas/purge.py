"""Request shapes of the purge and cleanup operations (:mod:`daemon.api.purge`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from common import limits
from daemon.schemas.validation import ScopeName, Strict, text


class PurgeIn(Strict):
    """A destructive request refuses fields it does not know (a misspelt
    option must not be ignored on the way to a purge)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: text(limits.purge_reason_max_chars) | None = None  # type: ignore[valid-type]


class ProjectPath(Strict):
    workspace: ScopeName
    project: ScopeName


class WorkspacePath(Strict):
    workspace: ScopeName


class CleanupIn(Strict):
    idle_secs: Annotated[int, Field(ge=0, le=10 * 365 * 86_400)] = (
        limits.empty_project_idle_secs)
