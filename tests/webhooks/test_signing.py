"""Signatures: the document's timestamped form binds time and body, the SDK's
verifier accepts the body-only header, Standard Webhooks verifies the third."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
import standardwebhooks
from ai_memory.webhooks import verify_webhook_signature

from daemon.webhooks import signing
from daemon.webhooks.events import canonical_json


def _headers(secret: str, body: bytes) -> dict[str, str]:
    return signing.delivery_headers(secret, body, event="memory_store", delivery_id="d-1",
                                    now_ms=1_777_267_800_123, user_agent="test")


def test_sdk_verifies_body_signature() -> None:
    body = canonical_json({"event": "memory_store", "memory_id": "m1", "namespace": "a/b"})
    h = _headers("s3cret", body)
    sig = h[signing.BODY_SIGNATURE]
    assert sig.startswith("sha256=")
    assert verify_webhook_signature(body, sig, "s3cret")
    assert not verify_webhook_signature(body + b" ", sig, "s3cret")
    assert not verify_webhook_signature(body, sig, "other")
    # the main header is the timestamped one, which the body-only rule does not match
    assert not verify_webhook_signature(body, h[signing.SIGNATURE], "s3cret")


def test_main_signature_is_the_documents_recipe() -> None:
    body = b'{"event":"memory_store","memory_id":"m1"}'
    h = _headers("s3cret", body)
    ts = h[signing.TIMESTAMP]
    expected = hmac.new(b"s3cret", f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    assert h[signing.SIGNATURE] == "sha256=" + expected
    assert h[signing.SIGNATURE_V2] == h[signing.SIGNATURE]


def test_v2_binds_timestamp_and_body() -> None:
    body = b'{"event":"notify"}'
    h = _headers("k", body)
    ts = h[signing.TIMESTAMP]
    assert ts == "2026-04-27T05:30:00Z"
    assert signing.verify_timestamped("k", ts, body, h[signing.SIGNATURE_V2])
    assert not signing.verify_timestamped("k", "2026-04-27T05:30:01Z", body, h[signing.SIGNATURE_V2])
    assert not signing.verify_timestamped("k", ts, body + b"x", h[signing.SIGNATURE_V2])
    assert not signing.verify_timestamped("k", ts, body, h[signing.BODY_SIGNATURE])
    assert h[signing.EVENT] == "memory_store" and h[signing.DELIVERY] == "d-1"


def test_canonical_json_is_sorted_and_compact() -> None:
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()


def test_generated_secrets_are_long_and_distinct() -> None:
    a, b = signing.new_secret(), signing.new_secret()
    assert a != b and len(a) >= 40


@pytest.mark.parametrize("secret", ["s3cret", signing.new_secret(),
                                    "whsec_" + base64.b64encode(b"k" * 32).decode()],
                         ids=["plain", "generated", "whsec"])
def test_standard_webhooks_library_verifies(secret: str) -> None:
    body = b'{"event":"memory_store","memory_id":"m1"}'
    now_ms = int(__import__("time").time() * 1000)
    h = signing.delivery_headers(secret, body, event="memory_store", delivery_id="d-7",
                                 now_ms=now_ms, user_agent="test")
    assert h["webhook-id"] == "d-7" and h["webhook-timestamp"] == str(now_ms // 1000)
    wh = standardwebhooks.Webhook(signing.standard_secret(secret))
    assert wh.verify(body, h) == {"event": "memory_store", "memory_id": "m1"}
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        wh.verify(body + b" ", h)
    other = standardwebhooks.Webhook(signing.standard_secret(signing.new_secret()))
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        other.verify(body, h)


def test_whsec_secret_passes_through() -> None:
    sw = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
    assert signing.standard_secret(sw) == sw
    assert signing.standard_key(sw) == b"0123456789abcdef0123456789abcdef"
