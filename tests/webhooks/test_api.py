"""``/api/v1/subscriptions``: create, list, delete; bad input is a 4xx that writes nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from ai_memory.models import Subscription, SubscriptionRequest

from common import limits
from daemon.settings import AuthSettings
from daemon.webhooks.names import ACCEPTED
from tests.webhooks.conftest import Daemon, Receiver, hooked_settings, hooks_with

BASE = "/api/v1/subscriptions"
AGENT = {"X-Agent-Id": "alice"}


async def listing(d: Daemon) -> list[dict[str, Any]]:
    resp = await d.c.get(BASE)
    assert resp.status == 200
    subs: list[dict[str, Any]] = (await resp.json())["subscriptions"]
    return subs


async def test_create_list_delete(daemon: Daemon, receiver: Receiver) -> None:
    resp = await daemon.c.post(BASE, json={"url": receiver.at("/h"), "events": ["notify"],
                                           "namespace": "team/"}, headers=AGENT)
    assert resp.status == 201
    made = await resp.json()
    assert made["url"] == receiver.at("/h") and made["events"] == ["notify"]
    assert made["namespace"] == "team/" and made["created_at"].endswith("Z")
    assert len(made["secret"]) >= 40  # generated, shown once
    with_own = await daemon.c.post(BASE, json={"url": receiver.at("/g"), "secret": "mine"})
    assert with_own.status == 201 and "secret" not in await with_own.json()
    subs = await listing(daemon)
    assert [s["id"] for s in subs] == [made["id"], (await with_own.json())["id"]]
    assert all("secret" not in s for s in subs)
    assert made["secret"] not in await (await daemon.c.get(BASE)).text()
    gone = await daemon.c.delete(f"{BASE}/{made['id']}")
    assert gone.status == 200 and (await gone.json())["deleted"] is True
    assert (await daemon.c.delete(f"{BASE}/{made['id']}")).status == 404
    assert (await daemon.c.delete(f"{BASE}/bad%20id")).status == 400
    assert len(await listing(daemon)) == 1


async def test_sdk_client_round_trip(daemon: Daemon, receiver: Receiver) -> None:
    req = SubscriptionRequest(url=receiver.at("/sdk"), events=["memory_store"])
    resp = await daemon.c.post(BASE, json=req.model_dump(), headers=AGENT)
    assert resp.status == 201
    sub = Subscription.model_validate(await resp.json())
    assert sub.events == ["memory_store"]
    raw = await (await daemon.c.get(BASE)).json()
    assert [Subscription.model_validate(s).id for s in raw["subscriptions"]] == [sub.id]


BAD: list[tuple[Any, int]] = [
    ("not json", 400),
    ([], 400),
    ({}, 400),
    ({"url": 5}, 400),
    ({"url": ""}, 400),
    ({"url": "URL", "events": "memory_store,memory_archive"}, 400),
    ({"url": "URL", "events": ""}, 400),
    ({"url": "URL", "events": " , "}, 400),
    ({"url": "URL", "events": 5}, 400),
    ({"url": "URL", "events": {"memory_store": True}}, 400),
    ({"url": "URL", "events": "x" * (limits.webhook_events_text_max_chars + 1)}, 400),
    ({"url": "URL", "events": ["memory_store", "memory_archive"]}, 400),
    ({"url": "URL", "events": ["*", "memory_archive"]}, 400),
    ({"url": "URL", "events": [1]}, 400),
    ({"url": "URL", "events": [None]}, 400),
    ({"url": "URL", "events": ["notify"] * (len(ACCEPTED) + 1)}, 400),
    ({"url": "URL", "event_types": []}, 400),
    ({"url": "URL", "event_types": "memory_store"}, 400),
    ({"url": "URL", "event_types": ["memory_archive"]}, 400),
    ({"url": "URL", "events": ["notify"], "event_types": ["memory_store"]}, 400),
    ({"url": "URL", "namespace_filter": 7}, 400),
    ({"url": "URL", "namespace_filter": "a\nb"}, 400),
    ({"url": "URL", "namespace_filter": ["team/a"]}, 400),
    ({"url": "URL", "agent_filter": "not an agent"}, 400),
    ({"url": "URL", "agent_filter": 3}, 400),
    ({"url": "URL", "signature_version": "v9"}, 400),
    ({"url": "URL", "signature_version": 1}, 400),
    ({"url": "URL", "namespace": ""}, 400),
    ({"url": "URL", "namespace": "a\nb"}, 400),
    ({"url": "URL", "secret": ""}, 400),
    ({"url": "URL", "secret": "a\x00b"}, 400),
    ({"url": "URL", "secret": "x" * (limits.webhook_secret_max_chars + 1)}, 400),
    ({"url": "URL", "agent_id": "mallory"}, 403),
    ({"url": "ftp://127.0.0.1/x"}, 400),
    ({"url": "http://user:pw@127.0.0.1/x"}, 400),
    ({"url": "http://169.254.169.254/latest/meta-data/"}, 400),
    ({"url": "http://10.0.0.1/hook"}, 400),
    ({"url": "http://[fe80::1]/hook"}, 400),
    ({"url": "http://0.0.0.0/hook"}, 400),
    ({"url": "http://127.0.0.1:" + "9" * 7 + "/"}, 400),
    ({"url": "http://127.0.0.1/" + "a" * limits.webhook_url_max_chars}, 400),
]


@pytest.mark.parametrize(("body", "status"), BAD)
async def test_bad_input_writes_nothing(daemon: Daemon, receiver: Receiver, body: Any,
                                        status: int) -> None:
    if isinstance(body, dict) and body.get("url") == "URL":
        body = {**body, "url": receiver.at("/h")}
    if isinstance(body, str):
        resp = await daemon.c.post(BASE, data=body, headers=AGENT)
    else:
        resp = await daemon.c.post(BASE, json=body, headers=AGENT)
    assert resp.status == status, await resp.text()
    err = await resp.json()
    assert err["error"] and err["code"]
    assert await listing(daemon) == []
    hooks = daemon.hooks
    assert hooks.db is not None
    n = await hooks.db.call(lambda c: c.execute("SELECT COUNT(*) FROM webhook_subscriptions")
                            .fetchone()[0])
    assert n == 0


async def test_loopback_refused_without_the_setting(daemon_factory: Any,
                                                    receiver: Receiver) -> None:
    strict: Daemon = await daemon_factory(hooks_with(allow_loopback_webhooks=False), db="s.db")
    resp = await strict.c.post(BASE, json={"url": receiver.at("/h")})
    assert resp.status == 400 and "loopback" in (await resp.json())["error"]
    assert await listing(strict) == []


async def test_subscription_cap(daemon_factory: Any, receiver: Receiver,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "subscriptions_max", 2)
    d: Daemon = await daemon_factory()
    for i in range(2):
        assert (await d.c.post(BASE, json={"url": receiver.at(f"/{i}")})).status == 201
    resp = await d.c.post(BASE, json={"url": receiver.at("/x")})
    assert resp.status == 429 and "subscriptions_max" in (await resp.json())["error"]
    assert len(await listing(d)) == 2


async def test_idempotency_key(daemon: Daemon, receiver: Receiver) -> None:
    hdrs = {**AGENT, "Idempotency-Key": "sub-1"}
    body = {"url": receiver.at("/h"), "events": ["notify"]}
    first = await (await daemon.c.post(BASE, json=body, headers=hdrs)).json()
    again = await daemon.c.post(BASE, json=body, headers=hdrs)
    assert again.status == 201
    second = await again.json()
    assert second["id"] == first["id"] and first["secret"]
    assert "secret" not in second and second["replayed"] is True  # a secret is shown once
    other = await daemon.c.post(BASE, json={**body, "events": []}, headers=hdrs)
    assert other.status == 409
    assert len(await listing(daemon)) == 1


async def test_api_key_required_when_configured(tmp_path: Any) -> None:
    settings = replace(hooked_settings(tmp_path / "auth.db"),
                       auth=AuthSettings(api_keys={"k1": "alice"}, require_api_key=True))
    d = await Daemon(settings).start()
    try:
        assert (await d.c.get(BASE)).status == 401
        assert (await d.c.get(BASE, headers={"X-API-Key": "k1"})).status == 200
    finally:
        await d.stop()
