"""Requests of the upstream SDK's wider surface: search and recall, forget,
links and lineage, import, consolidate, grants.

Query strings arrive as text (:class:`Lenient`); JSON bodies are strict.
Times in filters are RFC3339; tags are a comma list or a JSON list.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, StringConstraints, model_validator

from common import limits
from daemon.schemas.ids import RECORD_ID_RE
from daemon.schemas.memories import (
    Content,
    MemoryFields,
    Source,
    Tags,
    Timestamp,
    Title,
    _split_tags,
)
from daemon.schemas.validation import AgentId, Lenient, Namespace, Priority, Strict, Tier, text

QueryText = text(limits.search_query_max_chars, min_chars=1)
RecordId = Annotated[str, StringConstraints(pattern=RECORD_ID_RE)]
Relation = Annotated[str, StringConstraints(min_length=1, max_length=limits.link_relation_max_chars,
                                            pattern=r"^[A-Za-z0-9_\-.:]+$")]
CommaTags = Annotated[Tags | None, BeforeValidator(_split_tags)]


class SearchQuery(Lenient):
    q: QueryText  # type: ignore[valid-type]
    namespace: Namespace | None = None
    tier: Tier | None = None
    tags: CommaTags = None
    min_priority: Priority | None = None
    agent_id: AgentId | None = None
    as_agent: AgentId | None = None
    since: Timestamp | None = None
    until: Timestamp | None = None
    limit: Annotated[int, Field(ge=1, le=limits.search_limit_max)] = limits.search_limit_default
    consistency: Literal["quorum", "local"] = "quorum"


class SearchBody(Strict):
    """``POST /search``: the query as ``q`` or ``query``."""

    q: QueryText | None = None  # type: ignore[valid-type]
    query: QueryText | None = None  # type: ignore[valid-type]
    namespace: Namespace | None = None
    tier: Tier | None = None
    tags: CommaTags = None
    min_priority: Priority | None = None
    agent_id: AgentId | None = None
    as_agent: AgentId | None = None
    since: Timestamp | None = None
    until: Timestamp | None = None
    limit: Annotated[int, Field(ge=1, le=limits.search_limit_max)] = limits.search_limit_default
    consistency: Literal["quorum", "local"] = "quorum"

    @model_validator(mode="after")
    def _has_query(self) -> SearchBody:
        if not (self.q or self.query):
            raise ValueError("q (or query) is required")
        return self


class RecallBody(Strict):
    context: QueryText  # type: ignore[valid-type]
    namespace: Namespace | None = None
    tier: Tier | None = None
    tags: CommaTags = None
    min_priority: Priority | None = None
    as_agent: AgentId | None = None
    since: Timestamp | None = None
    until: Timestamp | None = None
    limit: Annotated[int, Field(ge=1, le=limits.recall_limit_max)] = limits.recall_limit_default
    budget_tokens: Annotated[int, Field(ge=1, le=10**7)] | None = None
    consistency: Literal["quorum", "local"] = "quorum"


class RecallQuery(RecallBody):
    """``GET /recall``: the same fields from the query string, where values arrive as text."""

    model_config = ConfigDict(strict=False)


Pattern = text(limits.search_query_max_chars, min_chars=1)


class ForgetFilter(Lenient):
    """``POST /forget`` filters, from the query string (the SDK) or a JSON
    body (upstream tools). At least one is required: an empty filter would
    delete everything."""

    namespace: Namespace | None = None
    pattern: Pattern | None = None  # type: ignore[valid-type]
    tier: Tier | None = None

    @model_validator(mode="after")
    def _narrow(self) -> ForgetFilter:
        if self.namespace is None and self.pattern is None and self.tier is None:
            raise ValueError("give at least one of namespace, pattern, tier")
        return self


class LinkBody(Strict):
    source_id: RecordId
    target_id: RecordId
    relation: Relation = "related_to"

    @model_validator(mode="after")
    def _distinct(self) -> LinkBody:
        if self.source_id == self.target_id:
            raise ValueError("a memory cannot link to itself")
        return self


class LineageQuery(Lenient):
    direction: Literal["ancestors", "descendants"] = "ancestors"
    max_depth: Annotated[int, Field(ge=1, le=limits.lineage_depth_max)] = limits.lineage_depth_max


class _ImportKey(Strict):
    id: RecordId


class ImportMemory(MemoryFields, _ImportKey):
    """One exported memory: the SDK's ``Memory`` shape (``id`` first)."""

    source: Source = "import"  # type: ignore[valid-type]
    access_count: Annotated[int, Field(ge=0)] = 0
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None
    expires_at: Timestamp | None = None
    agent_id: AgentId | None = None


class ImportLink(Strict):
    source_id: RecordId
    target_id: RecordId
    relation: Relation = "related_to"
    created_at: Timestamp | None = None


class ImportBody(Strict):
    memories: Annotated[list[Any], Field(max_length=limits.import_memories_max)]
    links: Annotated[list[Any], Field(max_length=limits.import_links_max)] | None = None


class ConsolidateBody(Strict):
    ids: Annotated[list[RecordId], Field(min_length=2, max_length=limits.consolidate_ids_max)]
    title: Title  # type: ignore[valid-type]
    summary: Content  # type: ignore[valid-type]
    namespace: Namespace | None = None
    tier: Tier = "long"
    tags: Tags | None = None
    agent_id: AgentId | None = None


class GrantBody(Strict):
    agent_id: AgentId
    permission: Literal["read", "write", "admin"] = "read"


class RevokeBody(Strict):
    agent_id: AgentId
