"""Reusable field types for request models.

Identifiers follow fixed patterns; free text refuses NUL and other C0/C1
control characters (tab, newline and carriage return are allowed), so a
hostile string is rejected with a 400 at the boundary instead of being
stored. Markup and quotes are ordinary text: they are stored as given and
escaped wherever they are rendered.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from common import limits
from common.errors import BadRequest

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
AGENT_ID_RE = r"^[A-Za-z0-9_\-:@./]+$"
SCOPE_RE = r"^[A-Za-z0-9_\-.]+$"


def _no_control(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    return value


def _no_control_line(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("must be one line")
    return _no_control(value)


def text(max_chars: int, *, min_chars: int = 0) -> object:
    return Annotated[
        str,
        StringConstraints(min_length=min_chars, max_length=max_chars),
        AfterValidator(_no_control),
    ]


AgentId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=limits.agent_id_max_chars, pattern=AGENT_ID_RE),
]
ScopeName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=limits.scope_name_max_chars, pattern=SCOPE_RE),
]
RequestId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=limits.request_id_max_chars, pattern=AGENT_ID_RE),
]
ClaimToken = Annotated[
    str, StringConstraints(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"),
]
# A lease's length (pop, renew); the limits are checked again by the service.
LeaseSeconds = Annotated[
    float, Field(ge=limits.claim_lease_secs_min, le=limits.claim_lease_secs_max),
]
Namespace = Annotated[
    str,
    StringConstraints(min_length=1, max_length=limits.namespace_max_chars),
    AfterValidator(_no_control_line),
]
Tier = Annotated[str, StringConstraints(pattern=r"^(short|mid|long)$")]
Priority = Annotated[int, Field(ge=limits.notify_priority_min, le=limits.notify_priority_max)]


class Strict(BaseModel):
    """Base for request bodies: unknown fields are ignored (SDK compatibility), types are not
    coerced from strings (a priority of "7" in JSON is a 400)."""

    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)


class Lenient(BaseModel):
    """Base for query strings, where everything arrives as text."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


M = TypeVar("M", bound=BaseModel)


def format_validation_error(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts[:10])


def validate(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise BadRequest(format_validation_error(exc)) from None
