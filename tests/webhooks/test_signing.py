"""Signatures: the SDK's verifier accepts ours; the timestamped V2 binds time and body."""

from __future__ import annotations

from ai_memory.webhooks import verify_webhook_signature

from daemon.webhooks import signing
from daemon.webhooks.events import canonical_json


def _headers(secret: str, body: bytes) -> dict[str, str]:
    return signing.delivery_headers(secret, body, event="memory_store", delivery_id="d-1",
                                    now_ms=1_777_267_800_123, user_agent="test")


def test_sdk_verifies_body_signature() -> None:
    body = canonical_json({"event": "memory_store", "memory_id": "m1", "namespace": "a/b"})
    h = _headers("s3cret", body)
    assert h[signing.SIGNATURE].startswith("sha256=")
    assert verify_webhook_signature(body, h[signing.SIGNATURE], "s3cret")
    assert not verify_webhook_signature(body + b" ", h[signing.SIGNATURE], "s3cret")
    assert not verify_webhook_signature(body, h[signing.SIGNATURE], "other")


def test_v2_binds_timestamp_and_body() -> None:
    body = b'{"event":"notify"}'
    h = _headers("k", body)
    ts = h[signing.TIMESTAMP]
    assert ts == "2026-04-27T05:30:00Z"
    assert signing.verify_timestamped("k", ts, body, h[signing.SIGNATURE_V2])
    assert not signing.verify_timestamped("k", "2026-04-27T05:30:01Z", body, h[signing.SIGNATURE_V2])
    assert not signing.verify_timestamped("k", ts, body + b"x", h[signing.SIGNATURE_V2])
    assert not signing.verify_timestamped("k", ts, body, h[signing.SIGNATURE])
    assert h[signing.EVENT] == "memory_store" and h[signing.DELIVERY] == "d-1"


def test_canonical_json_is_sorted_and_compact() -> None:
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()


def test_generated_secrets_are_long_and_distinct() -> None:
    a, b = signing.new_secret(), signing.new_secret()
    assert a != b and len(a) >= 40
