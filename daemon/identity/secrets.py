"""API key secrets and password hashes.

A key is ``aim_`` followed by 43 URL-safe base64 characters: 256 random
bits from the kernel's CSPRNG. Only its SHA-256 (hex) is stored and
replicated; the secret is shown once, at creation. A key's id is public
(``key list``, ``key revoke ID``): random for a created key, and for a key
given to a node at start (``AI_MEMORY_ROOT_KEY``) the uuid5 of its hash, so
every node that is given the same secret writes the same record.

Passwords (the web inbox login) are hashed with scrypt (hashlib) and a
random 16-byte salt, stored as ``scrypt$N$r$p$salt$hash`` (hex); checking
compares in constant time. Hashing costs ~16 MiB and tens of milliseconds,
so callers run it on a worker thread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from typing import Final

from common import limits
from common.errors import BadRequest
from common.randomid import random_bytes, token_hex

KEY_PREFIX: Final = "aim_"
_KEY_BYTES: Final = 32  # 256 bits
_KEY_NAMESPACE: Final = uuid.UUID("6b3f8f4e-9a51-4c1e-8f2e-2f6a6f1d0a7c")
_MIN_GIVEN_CHARS: Final = 32  # after the prefix: a given root key must carry real entropy
_MAX_GIVEN_CHARS: Final = limits.api_key_max_chars - len(KEY_PREFIX)
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P, _SCRYPT_LEN = 2**14, 8, 1, 32


def new_secret() -> str:
    raw = base64.urlsafe_b64encode(random_bytes(_KEY_BYTES)).rstrip(b"=").decode("ascii")
    return KEY_PREFIX + raw


def looks_like_key(secret: str) -> bool:
    """A replicated-directory key (as opposed to a static ``[auth].api_keys`` one)."""
    return secret.startswith(KEY_PREFIX)


def check_root_secret(secret: str) -> str:
    """A root key given to a node at start (``AI_MEMORY_ROOT_KEY``), checked."""
    secret = secret.strip()
    body = len(secret) - len(KEY_PREFIX)
    if not looks_like_key(secret) or not _MIN_GIVEN_CHARS <= body <= _MAX_GIVEN_CHARS:
        raise BadRequest("a bootstrap root key must be 'aim_' followed by 32-124 characters "
                         "(make one with: ai-memory key generate)")
    return secret


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_key_id() -> str:
    return "key_" + token_hex(8)


def key_id_for_hash(digest: str) -> str:
    """The id of a key whose secret was given to the node (idempotent bootstrap)."""
    return "key_" + uuid.uuid5(_KEY_NAMESPACE, digest).hex[:16]


def hash_password(password: str) -> str:
    salt = random_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R,
                            p=_SCRYPT_P, dklen=_SCRYPT_LEN)
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str | None) -> bool:
    if not stored:
        return False
    try:
        scheme, n, r, p, salt, want = stored.split("$")
        if scheme != "scrypt":
            return False
        got = hashlib.scrypt(password.encode("utf-8"), salt=bytes.fromhex(salt), n=int(n),
                             r=int(r), p=int(p), dklen=len(want) // 2,
                             maxmem=128 * int(r) * int(n) * 2 + 1024 * 1024)
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(got.hex(), want)
