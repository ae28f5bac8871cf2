"""Random identifiers without a system call each.

``uuid.uuid4()`` and ``secrets.token_hex()`` ask the kernel for fresh bytes
on every call (``os.urandom``). On the daemon's event loop that was a fifth
of a notify's CPU (py-spy, single node under load). Here the bytes come from
the same source, the kernel's CSPRNG, fetched 4 KiB at a time; ids keep the
uuid4 format. The buffer is per process (a fork starts a fresh one, so two
processes never hand out the same bytes) and guarded by a lock.
"""

from __future__ import annotations

import os
import re
import threading
import time

_CHUNK = 4096
_lock = threading.Lock()
_buf = b""
_pos = 0
_pid = 0


def random_bytes(n: int) -> bytes:
    global _buf, _pos, _pid
    with _lock:
        if _pid != os.getpid() or _pos + n > len(_buf):
            _buf = os.urandom(max(_CHUNK, n))
            _pos = 0
            _pid = os.getpid()
        out = _buf[_pos:_pos + n]
        _pos += n
        return out


def uuid4() -> str:
    """A random (version 4) UUID in its canonical text form."""
    b = bytearray(random_bytes(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid7(now_ms: int | None = None, tail: bytes | None = None) -> str:
    """A time-ordered (version 7, RFC 9562) UUID: 48 bits of Unix time in
    milliseconds (``now_ms``, or the clock), then 74 random bits (from
    ``tail``, 10 bytes, when given: the simulator's seeded ids).

    Records get these ids so that a table's primary-key index grows at its
    end: one batch of new notifications dirties one leaf page of that index
    instead of one random page per row. With 30,000 notes stored, a commit
    of 26 replicated notes cost 2.3 ms of CPU with uuid4 ids and 1.6 ms with
    ordered ones (``docs/performance.md``)."""
    ms = min(max(0, int(time.time() * 1000) if now_ms is None else int(now_ms)), 0xFFFFFFFFFFFF)
    if tail is not None and len(tail) != 10:
        raise ValueError("uuid7 tail must be 10 bytes")
    b = bytearray(ms.to_bytes(6, "big") + (random_bytes(10) if tail is None else tail))
    b[6] = (b[6] & 0x0F) | 0x70  # version 7
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def token_hex(nbytes: int) -> str:
    return random_bytes(nbytes).hex()


_INCARNATION = re.compile(r"[0-9a-f]{12}-[0-9a-f]{16}")


def incarnation_id(born_ms: int, salt: str | None = None) -> str:
    """A database incarnation id that orders by when it was made: 12 hex
    digits of ``born_ms``, a dash and 64 random bits (``salt``, 16 hex
    digits, instead of random ones: the simulator's seeded ids). A member's
    later disk must get a greater ``born_ms`` (its maker takes the larger
    of its clock and the copied history's), so peers can tell a replaced
    disk's late messages from the live one's (federation.core)."""
    return f"{max(0, born_ms) & 0xFFFFFFFFFFFF:012x}-{salt or token_hex(8)}"


def incarnation_born_ms(incarnation: str) -> int | None:
    """When an :func:`incarnation_id` was made; None for an id of the older,
    unordered form (32 random hex digits) or any other string."""
    if not _INCARNATION.fullmatch(incarnation):
        return None
    return int(incarnation[:12], 16)
