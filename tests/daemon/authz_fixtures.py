"""Shared pieces of the authorization tests: the projects every row acts on,
the grant sets the keys carry, and what :func:`common.policy.check` says each
key may do (the expectation the node's answers are held to)."""

from __future__ import annotations

from common import policy
from common.errors import Forbidden
from common.policy import Principal
from daemon.identity.memory_directory import parse_grant
from daemon.settings import AuthSettings, StaticKey

WS = "ws"
ALPHA = "alpha"  # the box of list/pop/handoff/briefing/session, the sender of send/cancel
BETA = "beta"  # the recipient of send
COORDS: dict[policy.Role, policy.Coord] = {"box": (WS, ALPHA), "from": (WS, ALPHA),
                                           "to": (WS, BETA)}

# key name -> its grants; together they allow and refuse every row
GRANT_SETS: dict[str, tuple[str, ...]] = {
    "both-write": (f"{WS}/{ALPHA}:write", f"{WS}/{BETA}:write"),
    "workspace-write": (f"{WS}/*:write",),
    "both-read": (f"{WS}/{ALPHA}:read", f"{WS}/{BETA}:read"),
    "alpha-write": (f"{WS}/{ALPHA}:write",),
    "beta-write": (f"{WS}/{BETA}:write",),
    "alpha-read": (f"{WS}/{ALPHA}:read",),
    "other-workspace": ("elsewhere/*:write",),
    "none": (),
}
ROOT_KEY = "k-root"
ROOT_USER = "admin"


def key_of(name: str) -> str:
    return f"k-{name}"


def static_keys() -> tuple[StaticKey, ...]:
    keys = [StaticKey(secret=key_of(name), user=f"user-{name}", grants=grants)
            for name, grants in GRANT_SETS.items()]
    keys.append(StaticKey(secret=ROOT_KEY, user=ROOT_USER, root=True))
    return tuple(keys)


def keys_auth(**extra: object) -> AuthSettings:
    return AuthSettings(mode="keys", static_keys=static_keys(), root_username=ROOT_USER,
                        **extra)  # type: ignore[arg-type]


def principal(name: str) -> Principal:
    return Principal(mode="keys", user=f"user-{name}",
                     grants=tuple(parse_grant(g) for g in GRANT_SETS[name]))


def allowed(name: str, action: str) -> bool:
    try:
        policy.check(principal(name), action, COORDS)
    except Forbidden:
        return False
    return True


def toml_keys() -> str:
    """The same keys as ``[[auth.static_keys]]`` entries of a node's TOML."""
    lines = ["[auth]", 'mode = "keys"', f'root_username = "{ROOT_USER}"', ""]
    for key in static_keys():
        lines += ["[[auth.static_keys]]", f'secret = "{key.secret}"', f'user = "{key.user}"',
                  f"root = {'true' if key.root else 'false'}",
                  "grants = [" + ", ".join(f'"{g}"' for g in key.grants) + "]", ""]
    return "\n".join(lines)
