"""Request shapes of the identity admin endpoints (``/api/v1/admin/...``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import StringConstraints

from common import limits
from daemon.schemas.validation import AgentId, Lenient, ScopeName, Strict, text

USER_NAME_RE = r"^[A-Za-z0-9_.@-]+$"
UserName = Annotated[
    str, StringConstraints(min_length=1, max_length=limits.user_name_max_chars,
                           pattern=USER_NAME_RE)]
Password = Annotated[
    str, StringConstraints(min_length=limits.password_min_chars,
                           max_length=limits.password_max_chars)]
KeyId = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^key_[0-9a-f]+$")]
Access = Literal["read", "write"]


class AddUser(Strict):
    name: UserName
    root: bool = False
    password: Password | None = None


class SetPassword(Strict):
    password: Password


class CreateKey(Strict):
    user: UserName
    agent: AgentId | None = None
    label: text(limits.key_label_max_chars) | None = None  # type: ignore[valid-type]


class GrantBody(Strict):
    user: UserName
    workspace: ScopeName
    project: ScopeName | None = None
    access: Access


class RevokeQuery(Lenient):
    user: UserName
    workspace: ScopeName
    project: ScopeName | None = None
    access: Access


class ListQuery(Lenient):
    user: UserName | None = None
    all: bool = False
    consistency: Literal["quorum", "local"] = "quorum"
