"""A real webhook receiver on 127.0.0.1 verifies real deliveries three ways,
each written from its description and not from our signing code:

* the notify-and-webhooks document: ``HMAC-SHA256(secret, "{timestamp}.{rawBody}")``
  against ``X-AI-Memory-Signature`` (the default);
* Standard Webhooks, with the ``standardwebhooks`` package;
* the upstream daemon's newer verifier: key = SHA-256 of the secret, message
  ``"{unix seconds}.{body}"``, a 300 s window -- read from our own headers
  by default, and from ``X-AI-Memory-Signature`` / ``X-AI-Memory-Timestamp``
  (where upstream's verifier looks) for a subscription made with
  ``signature_version: "sha256-key"``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import standardwebhooks
from aiohttp import web

from daemon.webhooks import signing
from tests.webhooks.conftest import Daemon, wait_until

WINDOW_SECS = 300
SECRET = "wire-secret-42"


def document_ok(secret: str, headers: Any, raw: bytes) -> bool:
    ts = headers["X-AI-Memory-Timestamp"]
    want = "sha256=" + hmac.new(secret.encode(), ts.encode() + b"." + raw,
                                hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, headers["X-AI-Memory-Signature"])


def upstream_ok(secret: str, timestamp: str, signature: str, raw: bytes,
                now: float | None = None) -> bool:
    """The newer upstream verifier, from its description."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - sent) > WINDOW_SECS:
        return False
    key = hashlib.sha256(secret.encode()).digest()
    want = hmac.new(key, f"{sent}.".encode() + raw, hashlib.sha256).hexdigest()
    got = signature.removeprefix("sha256=")
    return hmac.compare_digest(want, got)


def standard_ok(secret: str, headers: Any, raw: bytes) -> bool:
    try:
        standardwebhooks.Webhook(signing.standard_secret(secret)).verify(raw, dict(headers))
    except standardwebhooks.WebhookVerificationError:
        return False
    return True


async def receiver(aiohttp_server: Any, verdicts: list[dict[str, Any]]) -> str:
    async def hook(request: web.Request) -> web.Response:
        raw = await request.read()
        h = request.headers
        verdict = {
            "path": request.path,
            "event": json.loads(raw)["event"],
            "document": document_ok(SECRET, h, raw),
            "standard": standard_ok(SECRET, h, raw),
            "upstream_own_header": upstream_ok(SECRET, h["X-AI-Memory-Unix-Timestamp"],
                                               h["X-AI-Memory-Signature-Sha256-Key"], raw),
            "upstream_main_header": upstream_ok(SECRET, h["X-AI-Memory-Timestamp"],
                                                h["X-AI-Memory-Signature"], raw),
            "v2_document": hmac.compare_digest(
                "sha256=" + hmac.new(SECRET.encode(),
                                     h["X-AI-Memory-Timestamp"].encode() + b"." + raw,
                                     hashlib.sha256).hexdigest(),
                h["X-AI-Memory-Signature-V2"]),
            "wrong_secret_refused": not upstream_ok(SECRET + "x", h["X-AI-Memory-Unix-Timestamp"],
                                                    h["X-AI-Memory-Signature-Sha256-Key"], raw),
            "stale_refused": not upstream_ok(SECRET, h["X-AI-Memory-Unix-Timestamp"],
                                             h["X-AI-Memory-Signature-Sha256-Key"], raw,
                                             now=time.time() + WINDOW_SECS + 5),
            "correlation": h["X-AI-Memory-Correlation-Id"] == h["X-AI-Memory-Delivery"],
        }
        verdicts.append(verdict)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/{tail:.*}", hook)
    server = await aiohttp_server(app, host="127.0.0.1")
    return str(server.make_url("/"))


async def test_every_recipe_verifies_a_real_delivery(daemon: Daemon, aiohttp_server: Any) -> None:
    verdicts: list[dict[str, Any]] = []
    url = await receiver(aiohttp_server, verdicts)
    for path, version in (("default", None), ("upstream", "sha256-key")):
        body = {"url": url + path, "secret": SECRET, "events": "memory_store"}
        if version:
            body["signature_version"] = version
        resp = await daemon.c.post("/api/v1/subscriptions", json=body,
                                   headers={"X-Agent-Id": "alice"})
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["signature_version"] == (version or "secret")
    r = await daemon.c.post("/api/v1/memories", json={"title": "t", "content": "c"},
                            headers={"X-Agent-Id": "alice"})
    assert r.status == 201
    await wait_until(lambda: len(verdicts) == 2)
    by_path = {v.pop("path"): v for v in verdicts}
    common = {"event": "memory_store", "standard": True, "upstream_own_header": True,
              "v2_document": True, "wrong_secret_refused": True, "stale_refused": True,
              "correlation": True}
    # default: the document's recipe where it always was; upstream's has its own header
    assert by_path["/default"] == {**common, "document": True, "upstream_main_header": False}
    # sha256-key: upstream's verifier works unchanged on the main headers
    assert by_path["/upstream"] == {**common, "document": False, "upstream_main_header": True}


def test_sha256_key_recipe_by_hand() -> None:
    body = b'{"event":"memory_store"}'
    key = hashlib.sha256(b"s").digest()
    want = "sha256=" + hmac.new(key, b"1700000000." + body, hashlib.sha256).hexdigest()
    assert signing.sign_sha256_key("s", 1_700_000_000, body) == want
    headers = signing.delivery_headers("s", body, event="memory_store", delivery_id="d1",
                                       now_ms=1_700_000_000_999, user_agent="t",
                                       version=signing.SIGNATURE_SHA256_KEY)
    assert headers[signing.SIGNATURE] == headers[signing.SHA256_KEY_SIGNATURE] == want
    assert headers[signing.TIMESTAMP] == headers[signing.UNIX_TIMESTAMP] == "1700000000"
    assert signing.verify_timestamped("s", "1700000000", body, headers[signing.SIGNATURE_V2])
    default = signing.delivery_headers("s", body, event="memory_store", delivery_id="d1",
                                       now_ms=1_700_000_000_999, user_agent="t")
    assert default[signing.TIMESTAMP] == "2023-11-14T22:13:20Z"
    assert signing.verify_timestamped("s", default[signing.TIMESTAMP], body,
                                      default[signing.SIGNATURE])
    assert default[signing.SHA256_KEY_SIGNATURE] == want
