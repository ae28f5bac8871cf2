"""HMAC-SHA256 signatures on webhook deliveries.

Every POST is signed four ways with the subscription's secret, so each
verification style in use works on the same delivery:

* ``X-AI-Memory-Signature: sha256=<hex hmac(secret, timestamp + "." + body)>``
  -- the notify-and-webhooks contract (and what the upstream daemon sends):
  ``X-AI-Memory-Timestamp`` carries the exact string that was signed, so a
  receiver that rejects old timestamps also rejects replays.
  ``X-AI-Memory-Signature-V2`` repeats the same value for receivers written
  against this project's earlier releases.
* ``X-AI-Memory-Body-Signature: sha256=<hex hmac(secret, body)>`` -- the body
  alone, which is what the Python SDK's
  ``ai_memory.webhooks.verify_webhook_signature`` checks. It does not bind
  the timestamp, so it does not stop replays.
* Standard Webhooks (standardwebhooks.com): ``webhook-id`` (the delivery id),
  ``webhook-timestamp`` (integer Unix seconds) and
  ``webhook-signature: v1,<base64 hmac(key, id + "." + timestamp + "." +
  body)>``. The spec's secrets are ``whsec_`` + base64 of the key bytes: a
  subscription secret in that form is decoded to its key; any other secret
  uses its UTF-8 bytes as the key, and :func:`standard_secret` gives the
  ``whsec_`` form a receiver passes to ``standardwebhooks.Webhook``.
* The upstream daemon's newer recipe: key = SHA-256 of the secret (the 32
  raw digest bytes), message = ``"{unix seconds}.{body}"``, sent as
  ``X-AI-Memory-Signature-Sha256-Key: sha256=<hex>`` with the seconds in
  ``X-AI-Memory-Unix-Timestamp``; upstream's verifier allows 300 s of skew.

Upstream's verifier reads that recipe from ``X-AI-Memory-Signature`` and
``X-AI-Memory-Timestamp``, the headers that carry the document's recipe
here. A subscription made with ``signature_version: "sha256-key"`` gets it
there instead: ``X-AI-Memory-Timestamp`` is then the Unix seconds and
``X-AI-Memory-Signature`` the SHA-256-key signature, while
``X-AI-Memory-Signature-V2`` keeps the document's recipe over that same
timestamp string. The default, ``"secret"``, is the document's recipe.

``X-AI-Memory-Delivery`` (and ``X-AI-Memory-Correlation-Id``, upstream's
name) is the outbox row's id, the same on every retry of one delivery, so
receivers can drop duplicates; ``X-AI-Memory-Event`` names the event. The
body is signed as the exact bytes sent; the timestamps are those of the
attempt, so a retry after the receiver's window is signed afresh.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from datetime import UTC, datetime
from typing import Final, Literal, get_args

SIGNATURE = "X-AI-Memory-Signature"
SIGNATURE_V2 = "X-AI-Memory-Signature-V2"
BODY_SIGNATURE = "X-AI-Memory-Body-Signature"
TIMESTAMP = "X-AI-Memory-Timestamp"
EVENT = "X-AI-Memory-Event"
DELIVERY = "X-AI-Memory-Delivery"
CORRELATION = "X-AI-Memory-Correlation-Id"
SHA256_KEY_SIGNATURE = "X-AI-Memory-Signature-Sha256-Key"
UNIX_TIMESTAMP = "X-AI-Memory-Unix-Timestamp"
SW_ID = "webhook-id"
SW_TIMESTAMP = "webhook-timestamp"
SW_SIGNATURE = "webhook-signature"
SW_PREFIX = "whsec_"
SignatureVersion = Literal["secret", "sha256-key"]
SIGNATURE_SECRET: Final = "secret"  # the document's recipe in X-AI-Memory-Signature (default)
SIGNATURE_SHA256_KEY: Final = "sha256-key"  # upstream's newer recipe there instead
SIGNATURE_VERSIONS: Final = get_args(SignatureVersion)


def new_secret() -> str:
    """A fresh subscription secret: 32 random bytes as 43 URL-safe characters."""
    return secrets.token_urlsafe(32)


def _mac(secret: str, message: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def sign_body(secret: str, body: bytes) -> str:
    return _mac(secret, body)


def sign_timestamped(secret: str, timestamp: str, body: bytes) -> str:
    return _mac(secret, timestamp.encode("ascii") + b"." + body)


def sign_sha256_key(secret: str, unix_secs: int, body: bytes) -> str:
    """Upstream's newer recipe: HMAC-SHA256(SHA-256(secret), "{unix}.{body}")."""
    key = hashlib.sha256(secret.encode("utf-8")).digest()
    mac = hmac.new(key, str(unix_secs).encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def standard_key(secret: str) -> bytes:
    """The HMAC key of the Standard Webhooks signature for ``secret``."""
    if secret.startswith(SW_PREFIX):
        try:
            key = base64.b64decode(secret[len(SW_PREFIX):] + "==", validate=False)
        except (binascii.Error, ValueError):
            key = b""
        if key:
            return key
    return secret.encode("utf-8")


def standard_secret(secret: str) -> str:
    """The ``whsec_`` form of ``secret`` to hand to a Standard Webhooks verifier."""
    if secret.startswith(SW_PREFIX) and standard_key(secret) != secret.encode("utf-8"):
        return secret
    return SW_PREFIX + base64.b64encode(secret.encode("utf-8")).decode("ascii")


def sign_standard(secret: str, msg_id: str, unix_secs: int, body: bytes) -> str:
    signed = msg_id.encode("utf-8") + b"." + str(unix_secs).encode("ascii") + b"." + body
    mac = hmac.new(standard_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def header_timestamp(now_ms: int) -> str:
    return datetime.fromtimestamp(now_ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def delivery_headers(secret: str, body: bytes, *, event: str, delivery_id: str,
                     now_ms: int, user_agent: str,
                     version: str = SIGNATURE_SECRET) -> dict[str, str]:
    unix = now_ms // 1000
    keyed = sign_sha256_key(secret, unix, body)
    ts = str(unix) if version == SIGNATURE_SHA256_KEY else header_timestamp(now_ms)
    timestamped = sign_timestamped(secret, ts, body)
    return {
        "Content-Type": "application/json",
        "User-Agent": user_agent,
        EVENT: event,
        DELIVERY: delivery_id,
        CORRELATION: delivery_id,
        TIMESTAMP: ts,
        SIGNATURE: keyed if version == SIGNATURE_SHA256_KEY else timestamped,
        SIGNATURE_V2: timestamped,
        BODY_SIGNATURE: sign_body(secret, body),
        SW_ID: delivery_id,
        SW_TIMESTAMP: str(unix),
        SW_SIGNATURE: sign_standard(secret, delivery_id, unix, body),
        UNIX_TIMESTAMP: str(unix),
        SHA256_KEY_SIGNATURE: keyed,
    }


def verify_timestamped(secret: str, timestamp: str, body: bytes, signature: str) -> bool:
    """Receiver-side check of the timestamped signature (constant-time)."""
    try:
        expected = sign_timestamped(secret, timestamp, body)
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("utf-8"))
