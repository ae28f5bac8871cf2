"""Who is calling: agent identity for the public API.

An agent names itself with ``X-Agent-Id`` (the SDK's header) or a body /
query ``agent_id``; when both are present they must agree, or the request
is refused with 403 -- a sender cannot claim to be someone else in one field
and themselves in another. When ``[auth].api_keys`` maps keys to agents,
``X-API-Key`` *proves* the identity: the key decides who the caller is and
a differing ``X-Agent-Id`` is a 403. Peer-to-peer requests are
authenticated separately (:mod:`daemon.peer_auth`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aiohttp import web

from common import limits
from common.errors import BadRequest, Forbidden, Unauthorized
from common.policy import KEYS, Principal
from daemon.settings import AuthSettings
from daemon.validation import AGENT_ID_RE

_AGENT_RE = re.compile(AGENT_ID_RE.strip("^$"))


@dataclass(frozen=True, slots=True)
class Identity:
    agent_id: str | None
    verified: bool


def check_agent_id(value: str, what: str = "agent_id") -> str:
    if not value or len(value) > limits.agent_id_max_chars or not _AGENT_RE.fullmatch(value):
        raise BadRequest(
            f"{what} must be 1-{limits.agent_id_max_chars} characters of [A-Za-z0-9_-:@./]")
    return value


def identify(request: web.Request, auth: AuthSettings) -> Identity:
    header = request.headers.get("X-Agent-Id") or None
    if header is not None:
        check_agent_id(header, "X-Agent-Id")
    key = request.headers.get("X-API-Key") or None
    if auth.api_keys:
        if key is not None:
            agent = auth.api_keys.get(key)
            if agent is None:
                raise Unauthorized("unknown API key")
            if header is not None and header != agent:
                raise Forbidden(f"X-Agent-Id {header!r} does not match the API key's agent")
            return Identity(agent, True)
        if auth.require_api_key:
            raise Unauthorized("X-API-Key required")
    return Identity(header, False)


def acting_agent(identity: Identity, claimed: str | None, *, required: bool = True) -> str | None:
    """The agent a request acts as: the identity and the claimed id must agree."""
    if claimed is not None:
        check_agent_id(claimed)
    if identity.agent_id and claimed and claimed != identity.agent_id:
        raise Forbidden(
            f"agent_id {claimed!r} differs from the caller's identity {identity.agent_id!r}")
    agent = identity.agent_id or claimed
    if agent is None and required:
        raise BadRequest("agent identity required: send X-Agent-Id or agent_id")
    return agent


def principal_of(request: web.Request, auth: AuthSettings) -> Principal:
    """The request's :class:`common.policy.Principal`, for :func:`common.policy.check`.

    Without keys, the caller is anonymous and the agent is the claimed one.
    A static ``[auth].api_keys`` key proves its agent and, as the operator's
    own configuration, carries root rights.
    """
    who = identify(request, auth)
    if not who.verified:
        return Principal.anonymous(who.agent_id)
    return Principal(mode=KEYS, root=True, agent=who.agent_id, agent_bound=True)
