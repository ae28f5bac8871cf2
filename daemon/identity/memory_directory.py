"""Where a presented key becomes a :class:`common.policy.Principal`.

A node resolves keys through one :class:`common.policy.Directory`, built in
:func:`daemon.wiring.build_node` and kept as ``node.directory``. This module
holds the in-memory ones:

* :class:`MemoryDirectory` -- secrets (held only as sha256 digests) mapped
  to principals; ``add`` and ``remove`` change it at once. Tests use it as
  the fake beside the seam, and :func:`static_directory` fills one from the
  node's own configuration;
* :func:`static_directory` -- the keys of ``[auth]``: each legacy
  ``api_keys`` entry (``key = agent``) is a root key bound to that agent, as
  those keys always were the operator's own; each ``[[auth.static_keys]]``
  entry is a user's key with its grants;
* :class:`ChainDirectory` -- asks several directories in order (the static
  keys, then the replicated users and keys) and takes the first answer.

Lookups go by the digest of the presented secret, so the secret itself is
never compared or kept, and the time a lookup takes does not depend on how
much of a guess was right.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from common.errors import BadRequest
from common.policy import KEYS, Directory, Principal, ProjectGrant
from daemon.settings import AuthSettings, StaticKey


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


class MemoryDirectory:
    """Principals by key digest, in memory."""

    def __init__(self, entries: Iterable[tuple[str, Principal]] = ()) -> None:
        self._by_digest: dict[str, Principal] = {}
        for secret, principal in entries:
            self.add(secret, principal)

    def add(self, secret: str, principal: Principal) -> None:
        self._by_digest[digest(secret)] = principal

    def remove(self, secret: str) -> None:
        self._by_digest.pop(digest(secret), None)

    def __len__(self) -> int:
        return len(self._by_digest)

    async def resolve(self, secret: str) -> Principal | None:
        return self._by_digest.get(digest(secret))


class ChainDirectory:
    """The first directory that knows the key answers."""

    def __init__(self, *directories: Directory) -> None:
        self.directories = directories

    async def resolve(self, secret: str) -> Principal | None:
        for directory in self.directories:
            found = await directory.resolve(secret)
            if found is not None:
                return found
        return None


def parse_grant(text: str) -> ProjectGrant:
    """``WORKSPACE/PROJECT:read|write``; ``WORKSPACE/*`` covers the whole workspace."""
    scope, sep, access = text.rpartition(":")
    workspace, slash, project = scope.partition("/")
    if not sep or not slash or not workspace or not project or access not in ("read", "write"):
        raise BadRequest(f"grant {text!r} must read WORKSPACE/PROJECT:read|write "
                         "(PROJECT * for every project of the workspace)")
    return ProjectGrant(workspace, None if project == "*" else project,
                        access)  # type: ignore[arg-type]


def static_principal(key: StaticKey, auth: AuthSettings) -> Principal:
    return Principal(
        mode=KEYS, user=key.user, root=key.root, agent=key.agent,
        agent_bound=key.agent is not None, key_id=f"static:{digest(key.secret)[:12]}",
        grants=tuple(parse_grant(g) for g in key.grants),
        owner_user=(auth.root_username or "") if key.root else key.user)


def static_directory(auth: AuthSettings) -> MemoryDirectory:
    """The keys the node's configuration names (see the module docstring)."""
    directory = MemoryDirectory()
    for secret, agent in auth.api_keys.items():
        directory.add(secret, Principal(
            mode=KEYS, user=auth.root_username or "root", root=True, agent=agent,
            agent_bound=True, key_id=f"static:{digest(secret)[:12]}",
            owner_user=auth.root_username or ""))
    for key in auth.static_keys:
        directory.add(key.secret, static_principal(key, auth))
    return directory
