"""Authentication of peer-to-peer requests.

With a cluster secret configured, every peer request carries
``X-AIM-Node``, ``X-AIM-Ts`` (unix seconds), ``X-AIM-Nonce`` and
``X-AIM-Sig = hex(HMAC-SHA256(secret, node\\nts\\nnonce\\nMETHOD\\npath\\nsha256(body)))``.
The receiver refuses a bad signature, a timestamp outside
``limits.auth_clock_skew_max_secs`` and a nonce it has already seen (a bounded
cache: replays inside the window are refused, older ones fail the time
check). Without a secret, peer requests are accepted and the daemon warns at
start that the cluster is open.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Mapping

from common import limits
from common.errors import Unauthorized
from common.randomid import token_hex


def _mac(secret: str, node: str, ts: str, nonce: str, method: str, path: str, body: bytes) -> str:
    digest = hashlib.sha256(body).hexdigest()
    msg = "\n".join((node, ts, nonce, method.upper(), path, digest)).encode()
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def sign(secret: str, node: str, method: str, path: str, body: bytes, now_s: float) -> dict[str, str]:
    ts = str(int(now_s))
    nonce = token_hex(12)
    return {
        "X-AIM-Node": node,
        "X-AIM-Ts": ts,
        "X-AIM-Nonce": nonce,
        "X-AIM-Sig": _mac(secret, node, ts, nonce, method, path, body),
    }


class Verifier:
    def __init__(self, secret: str | None) -> None:
        self.secret = secret
        self._seen: OrderedDict[str, None] = OrderedDict()

    def verify(self, headers: Mapping[str, str], method: str, path: str, body: bytes,
               now_s: float) -> str | None:
        """Return the authenticated peer node id (or the claimed one when no
        secret is set); raise Unauthorized otherwise."""
        get = headers.get
        node = get("X-AIM-Node") or ""
        if self.secret is None:
            return node or None
        ts, nonce, sig = get("X-AIM-Ts") or "", get("X-AIM-Nonce") or "", get("X-AIM-Sig") or ""
        if not (node and ts and nonce and sig):
            raise Unauthorized("peer request is not signed")
        try:
            age = abs(now_s - int(ts))
        except ValueError:
            raise Unauthorized("bad peer timestamp") from None
        if age > limits.auth_clock_skew_max_secs:
            raise Unauthorized("peer request timestamp outside the allowed clock skew")
        expected = _mac(self.secret, node, ts, nonce, method, path, body)
        if not hmac.compare_digest(expected, sig):
            raise Unauthorized("bad peer signature")
        if nonce in self._seen:
            raise Unauthorized("replayed peer request")
        self._seen[nonce] = None
        while len(self._seen) > limits.auth_nonce_cache_max:
            self._seen.popitem(last=False)
        return node
