"""Agent registration request and the agent JSON shape.

``last_seen_at`` is always a string (the SDK's ``AgentRegistration``
requires it): an agent never seen since it registered was last seen when
it registered.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints

from common import limits
from daemon.schemas.timefmt import rfc3339
from daemon.schemas.validation import AgentId, Strict

_PRINTABLE_LINE = r"^[^\x00-\x1f\x7f-\x9f]+$"

AgentType = Annotated[
    str, StringConstraints(min_length=1, max_length=limits.agent_type_max_chars, pattern=_PRINTABLE_LINE)]
Capability = Annotated[
    str, StringConstraints(min_length=1, max_length=limits.capability_max_chars, pattern=_PRINTABLE_LINE)]


def _dedupe(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


class RegisterAgent(Strict):
    agent_id: AgentId
    agent_type: AgentType
    capabilities: Annotated[
        list[Capability], Field(max_length=limits.capabilities_max), AfterValidator(_dedupe)
    ] = Field(default_factory=list)


def agent_json(row: dict[str, Any]) -> dict[str, Any]:
    registered = rfc3339(row["registered_at_ms"])
    seen = row.get("last_seen_at_ms")
    return {
        "agent_id": row["agent_id"],
        "agent_type": row["agent_type"],
        "capabilities": list(row.get("capabilities") or []),
        "registered_at": registered,
        "last_seen_at": rfc3339(seen) if seen is not None else registered,
    }
