"""Memory requests and the memory JSON shape.

Bodies follow the SDK's ``CreateMemory`` / ``UpdateMemory``: every field has
the server default the SDK documents, so a minimal ``{title, content}``
works. Types are strict (a priority of ``"5"`` is refused, not coerced),
text refuses control characters, tags may not contain commas (the list
filter is a comma list), and metadata is bounded by its JSON size. A
memory's lifetime is either ``ttl_secs`` or an RFC3339 ``expires_at``,
never both; without either, the tier's default applies (service side).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BeforeValidator, Field, StringConstraints, model_validator

from common import limits
from daemon.schemas.timefmt import parse_rfc3339, rfc3339
from daemon.schemas.validation import AgentId, Lenient, Namespace, Priority, Strict, Tier, text

Tag = Annotated[
    str,
    StringConstraints(min_length=1, max_length=limits.tag_max_chars,
                      pattern=r"^[^,\x00-\x1f\x7f-\x9f]+$"),
]
Tags = Annotated[list[Tag], Field(max_length=limits.tags_max)]
Confidence = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
TtlSecs = Annotated[int, Field(ge=1, le=limits.memory_ttl_secs_max)]
Title = text(limits.memory_title_max_chars, min_chars=1)
Content = text(limits.memory_content_max_chars, min_chars=1)
Source = text(limits.memory_source_max_chars, min_chars=1)
Scope = text(limits.memory_scope_max_chars, min_chars=1)


def _check_time(value: str) -> str:
    parse_rfc3339(value)
    return value


def _check_metadata(value: dict[str, Any]) -> dict[str, Any]:
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode())
    except RecursionError:
        raise ValueError("metadata is nested too deeply") from None
    if size > limits.memory_metadata_max_bytes:
        raise ValueError(
            f"metadata is {size} bytes of JSON, over {limits.memory_metadata_max_bytes} "
            "(limits.memory_metadata_max_bytes)")
    return value


def _split_tags(value: Any) -> Any:
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()] or None
    return value


Timestamp = Annotated[str, AfterValidator(_check_time)]
Metadata = Annotated[dict[str, Any], AfterValidator(_check_metadata)]



NAMESPACE_DEFAULT: Final = "global"  # a new memory's namespace when it names none

class MemoryFields(Strict):
    """The fields of a memory and their rules, as every body that carries one
    takes them: a create, an import (:class:`daemon.schemas.search.ImportMemory`)
    and an upstream push (:class:`daemon.api.sync.PushedMemory`). Each adds
    its own fields and sets ``source``'s default (a subclass's own fields come
    after these; a mixin listed after this class puts an ``id`` first)."""

    title: Title  # type: ignore[valid-type]
    content: Content  # type: ignore[valid-type]
    tier: Tier = "mid"
    namespace: Namespace = NAMESPACE_DEFAULT
    tags: Tags = Field(default_factory=list)
    priority: Priority = 5
    confidence: Confidence = 1.0
    source: Source = "api"  # type: ignore[valid-type]
    metadata: Metadata = Field(default_factory=dict)


class CreateMemory(MemoryFields):
    ttl_secs: TtlSecs | None = None
    expires_at: Timestamp | None = None
    agent_id: AgentId | None = None
    scope: Scope | None = None  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _one_lifetime(self) -> CreateMemory:
        if self.ttl_secs is not None and self.expires_at is not None:
            raise ValueError("give ttl_secs or expires_at, not both")
        return self


class UpdateMemory(Strict):
    """A partial update: absent fields keep their value. ``expires_at: null``
    clears the expiry; any other ``null`` means "unchanged"."""

    title: Title | None = None  # type: ignore[valid-type]
    content: Content | None = None  # type: ignore[valid-type]
    tier: Tier | None = None
    namespace: Namespace | None = None
    tags: Tags | None = None
    priority: Priority | None = None
    confidence: Confidence | None = None
    source: Source | None = None  # type: ignore[valid-type]
    metadata: Metadata | None = None
    ttl_secs: TtlSecs | None = None
    expires_at: Timestamp | None = None
    agent_id: AgentId | None = None

    @model_validator(mode="after")
    def _something(self) -> UpdateMemory:
        if not (self.model_fields_set - {"agent_id"}):
            raise ValueError("nothing to update: give at least one field")
        if self.ttl_secs is not None and self.expires_at is not None:
            raise ValueError("give ttl_secs or expires_at, not both")
        return self


class ListMemoriesQuery(Lenient):
    namespace: Namespace | None = None
    tier: Tier | None = None
    tags: Annotated[Tags | None, BeforeValidator(_split_tags)] = None
    min_priority: Priority | None = None
    agent_id: AgentId | None = None
    limit: Annotated[int, Field(ge=1, le=limits.memory_list_limit_max)] = limits.memory_list_limit_default
    offset: Annotated[int, Field(ge=0, le=10**9)] = 0



def memory_json(row: dict[str, Any]) -> dict[str, Any]:
    """The SDK's ``Memory`` shape from a store row."""
    return {
        "id": row["id"],
        "tier": row["tier"],
        "namespace": row["namespace"],
        "title": row["title"],
        "content": row["content"],
        "tags": list(row.get("tags") or []),
        "priority": row["priority"],
        "confidence": row["confidence"],
        "source": row["source"],
        "access_count": row.get("access_count", 0),
        "created_at": rfc3339(row["created_at_ms"]),
        "updated_at": rfc3339(row["updated_at_ms"]),
        "last_accessed_at": rfc3339(row.get("last_accessed_at_ms")),
        "expires_at": rfc3339(row.get("expires_at_ms")),
        "agent_id": row.get("agent_id"),
        "metadata": dict(row.get("metadata") or {}),
    }
