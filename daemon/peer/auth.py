"""Authentication of peer-to-peer requests.

With a cluster secret configured, every peer request carries

==============  ==========================================================
``X-AIM-Node``  the sending member's id
``X-AIM-To``    the receiving member's id
``X-AIM-Boot``  the receiver's boot id, as the sender last learned it
``X-AIM-Ts``    unix time of signing, milliseconds
``X-AIM-Nonce`` 96 random bits
``X-AIM-Body``  hex sha256 of the body (its length is the Content-Length)
``X-AIM-Sig``   hex HMAC-SHA256(secret, the lines of :func:`_message`)
==============  ==========================================================

The MAC covers every one of those, the method, the path and the body's
length and digest. The receiver checks, **before reading the body**
(:meth:`Verifier.verify_headers`): that the request is signed, that it is
addressed to this node (a request signed for node 2 is refused by node 3),
the timestamp against ``limits.auth_clock_skew_max_secs``, the MAC, the boot
id, and that the nonce is new. Only then is the body read (up to its
declared length, at most ``limits.peer_body_max_bytes``) and compared with
the signed digest (:meth:`Verifier.check_body`). An unsigned or forged
request therefore costs the receiver its headers, never its body.

**Replays.** Inside one process lifetime a nonce is accepted once: a bounded
cache remembers recent nonces per sender, and evicting a nonce raises that
sender's timestamp floor past it, so an evicted nonce cannot come back
either. Across a restart the cache is gone, so the receiver draws a new
random *boot id* each time it starts and only accepts requests signed for
its current one. A request captured before a restart names the old boot id
and is refused however fresh its timestamp; no state has to be persisted and
no clocks have to agree. A sender learns the current boot id from the
receiver's 401 (``code: peer_boot_mismatch``, header ``X-AIM-Boot``, sent
only to a request whose MAC is valid) and retries once; that costs one
extra round trip per sender after each restart.

Without a secret, peer requests are accepted and the daemon warns at start
that the cluster is open.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from common import limits
from common.errors import BadRequest, PayloadTooLarge, Unauthorized
from common.randomid import token_hex

SCHEME = "aim-peer-v2"
BOOT_HEADER = "X-AIM-Boot"
BOOT_MISMATCH = "peer_boot_mismatch"


def _message(node: str, to: str, boot: str, ts: str, nonce: str, method: str, path: str,
             length: int, digest: str) -> bytes:
    return "\n".join((SCHEME, node, to, boot, ts, nonce, method.upper(), path, str(length),
                      digest)).encode()


def _mac(secret: str, msg: bytes) -> str:
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def sign(secret: str, node: str, to: str, method: str, path: str, body: bytes, now_s: float,
         boot: str = "") -> dict[str, str]:
    """Headers that authenticate ``body`` from ``node`` to member ``to``
    (whose boot id the sender believes is ``boot``)."""
    ts = str(int(now_s * 1000))
    nonce = token_hex(12)
    digest = hashlib.sha256(body).hexdigest()
    return {
        "X-AIM-Node": node,
        "X-AIM-To": to,
        BOOT_HEADER: boot,
        "X-AIM-Ts": ts,
        "X-AIM-Nonce": nonce,
        "X-AIM-Body": digest,
        "X-AIM-Sig": _mac(secret, _message(node, to, boot, ts, nonce, method, path, len(body),
                                           digest)),
    }


class BootMismatch(Unauthorized):
    """A correctly signed request for another boot of this node (a replay
    from before a restart, or a sender that has not learned the new boot id)."""

    code = BOOT_MISMATCH


@dataclass(frozen=True, slots=True)
class Checked:
    node: str
    digest: str | None  # the signed body digest (None: no secret, nothing to check)


class Verifier:
    def __init__(self, secret: str | None, node_id: str, boot: str | None = None) -> None:
        self.secret = secret
        self.node_id = node_id
        self.boot = boot or token_hex(16)
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._floor: dict[str, int] = {}

    def verify_headers(self, headers: Mapping[str, str], method: str, path: str,
                       content_length: int | None, now_s: float) -> Checked:
        """Authenticate a peer request from its headers alone; raise
        Unauthorized (or BootMismatch) otherwise. Call before reading the body."""
        get = headers.get
        node = get("X-AIM-Node") or ""
        if self.secret is None:
            return Checked(node, None)
        to, boot = get("X-AIM-To") or "", get(BOOT_HEADER) or ""
        ts, nonce = get("X-AIM-Ts") or "", get("X-AIM-Nonce") or ""
        digest, sig = get("X-AIM-Body") or "", get("X-AIM-Sig") or ""
        if not (node and to and ts and nonce and digest and sig):
            raise Unauthorized("peer request is not signed")
        if to != self.node_id:
            raise Unauthorized(f"peer request is signed for {to!r}, not this node")
        if content_length is None:
            raise BadRequest("a signed peer request needs a Content-Length")
        if content_length > limits.peer_body_max_bytes:
            raise PayloadTooLarge(f"peer body over {limits.peer_body_max_bytes} bytes "
                                  "(limits.peer_body_max_bytes)")
        try:
            ts_ms = int(ts)
        except ValueError:
            raise Unauthorized("bad peer timestamp") from None
        if abs(now_s * 1000 - ts_ms) > limits.auth_clock_skew_max_secs * 1000:
            raise Unauthorized("peer request timestamp outside the allowed clock skew")
        expected = _mac(self.secret, _message(node, to, boot, ts, nonce, method, path,
                                              content_length, digest))
        if not hmac.compare_digest(expected, sig):
            raise Unauthorized("bad peer signature")
        if boot != self.boot:
            raise BootMismatch("peer request is signed for another boot of this node")
        key = (node, nonce)
        if key in self._seen or ts_ms < self._floor.get(node, 0):
            raise Unauthorized("replayed peer request")
        self._seen[key] = ts_ms
        while len(self._seen) > limits.auth_nonce_cache_max:
            (old_node, _), old_ts = self._seen.popitem(last=False)
            self._floor[old_node] = max(self._floor.get(old_node, 0), old_ts + 1)
        return Checked(node, digest)

    @staticmethod
    def check_body(checked: Checked, body: bytes) -> None:
        if checked.digest is not None and not hmac.compare_digest(
                hashlib.sha256(body).hexdigest(), checked.digest):
            raise Unauthorized("peer body does not match its signed digest")
