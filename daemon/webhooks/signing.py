"""HMAC-SHA256 signatures on webhook deliveries.

Each POST carries two signatures with the subscription's secret, so both
verification styles in circulation work:

* ``X-AI-Memory-Signature: sha256=<hex hmac(secret, body)>`` -- what the
  Python SDK's ``ai_memory.webhooks.verify_webhook_signature`` checks;
* ``X-AI-Memory-Signature-V2: sha256=<hex hmac(secret, timestamp + "." +
  body)>`` -- binds the ``X-AI-Memory-Timestamp`` header to the body, so a
  receiver that rejects old timestamps also rejects replays.

``X-AI-Memory-Timestamp`` is the attempt time in RFC3339 UTC (seconds);
``X-AI-Memory-Delivery`` is the outbox row's id, the same on every retry of
one delivery, so receivers can drop duplicates; ``X-AI-Memory-Event`` names
the event. The body is signed as the exact bytes sent.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime

SIGNATURE = "X-AI-Memory-Signature"
SIGNATURE_V2 = "X-AI-Memory-Signature-V2"
TIMESTAMP = "X-AI-Memory-Timestamp"
EVENT = "X-AI-Memory-Event"
DELIVERY = "X-AI-Memory-Delivery"


def new_secret() -> str:
    """A fresh subscription secret: 32 random bytes as 43 URL-safe characters."""
    return secrets.token_urlsafe(32)


def _mac(secret: str, message: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def sign_body(secret: str, body: bytes) -> str:
    return _mac(secret, body)


def sign_timestamped(secret: str, timestamp: str, body: bytes) -> str:
    return _mac(secret, timestamp.encode("ascii") + b"." + body)


def header_timestamp(now_ms: int) -> str:
    return datetime.fromtimestamp(now_ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def delivery_headers(secret: str, body: bytes, *, event: str, delivery_id: str,
                     now_ms: int, user_agent: str) -> dict[str, str]:
    ts = header_timestamp(now_ms)
    return {
        "Content-Type": "application/json",
        "User-Agent": user_agent,
        EVENT: event,
        DELIVERY: delivery_id,
        TIMESTAMP: ts,
        SIGNATURE: sign_body(secret, body),
        SIGNATURE_V2: sign_timestamped(secret, ts, body),
    }


def verify_timestamped(secret: str, timestamp: str, body: bytes, signature: str) -> bool:
    """Receiver-side check of the V2 signature (constant-time)."""
    try:
        expected = sign_timestamped(secret, timestamp, body)
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("utf-8"))
