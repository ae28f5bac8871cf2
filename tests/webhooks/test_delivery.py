"""Webhooks end to end on a real node: subscribe over HTTP, write through
the API, receive signed POSTs on a real receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from ai_memory.webhooks import verify_webhook_signature
from aiohttp import web

from common import ops as K
from common.ops import Op
from daemon.settings import Member
from daemon.webhooks import signing
from federation.messages import Replicate
from tests.webhooks.conftest import Daemon, Receiver, hooks_with, wait_until

AGENT = {"X-Agent-Id": "alice"}


async def subscribe(d: Daemon, url: str, **fields: Any) -> dict[str, Any]:
    resp = await d.c.post("/api/v1/subscriptions", json={"url": url, **fields}, headers=AGENT)
    assert resp.status == 201, await resp.text()
    out: dict[str, Any] = await resp.json()
    return out


async def create_memory(d: Daemon, **fields: Any) -> str:
    body = {"title": "t", "content": "c", "namespace": "team/a", **fields}
    resp = await d.c.post("/api/v1/memories", json=body, headers=AGENT)
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


def payload(call: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(call.body)
    return out


def counter(d: Daemon, name: str, **labels: str) -> float:
    series = d.n.metrics.counters.get(name, {})
    return sum(v for k, v in series.items() if set(labels.items()) <= set(k))


async def test_events_arrive_signed(daemon: Daemon, receiver: Receiver) -> None:
    await subscribe(daemon, receiver.at("/hook"), secret="s3cret-value")
    mid = await create_memory(daemon)
    r = await daemon.c.put(f"/api/v1/memories/{mid}", json={"content": "new"}, headers=AGENT)
    assert r.status == 200, await r.text()
    r = await daemon.c.post(f"/api/v1/memories/{mid}/promote", headers=AGENT)
    assert r.status == 200, await r.text()
    r = await daemon.c.delete(f"/api/v1/memories/{mid}", headers=AGENT)
    assert r.status == 200, await r.text()
    r = await daemon.c.post("/api/v1/notify", json={"target_agent_id": "bob", "title": "hi",
                                                    "payload": "p"}, headers=AGENT)
    assert r.status == 201, await r.text()
    await wait_until(lambda: len(receiver.ok()) == 5)
    names = [payload(c)["event"] for c in receiver.calls]
    assert names == ["memory_store", "memory_update", "memory_promote", "memory_delete", "notify"]
    for call in receiver.calls:
        h = call.headers
        assert h["Content-Type"] == "application/json"
        assert verify_webhook_signature(call.body, h[signing.BODY_SIGNATURE], "s3cret-value")
        assert signing.verify_timestamped("s3cret-value", h[signing.TIMESTAMP], call.body,
                                          h[signing.SIGNATURE])
        assert h[signing.EVENT] == payload(call)["event"]
    assert len({c.headers[signing.DELIVERY] for c in receiver.calls}) == 5
    first = payload(receiver.calls[0])
    assert first["memory_id"] == mid and first["namespace"] == "team/a"
    assert first["agent_id"] == "alice" and first["tier"] == "mid" and first["node_id"] == "node1"
    assert payload(receiver.calls[2])["tier"] == "long"
    assert payload(receiver.calls[4])["to"] == "bob"
    assert counter(daemon, "webhook_delivered_total") == 5


async def test_namespace_and_event_filters(daemon: Daemon, receiver: Receiver) -> None:
    await subscribe(daemon, receiver.at("/team-a"), namespace="team/a")
    await subscribe(daemon, receiver.at("/deletes"), events=["memory_delete"])
    a = await create_memory(daemon, namespace="team/a/sub")
    b = await create_memory(daemon, namespace="team/b")
    for mid in (a, b):
        assert (await daemon.c.delete(f"/api/v1/memories/{mid}", headers=AGENT)).status == 200
    await wait_until(lambda: len(receiver.ok()) == 4)
    team_a = [(payload(c)["event"], payload(c)["memory_id"]) for c in receiver.ok("/team-a")]
    assert team_a == [("memory_store", a), ("memory_delete", a)]
    deletes = [payload(c)["memory_id"] for c in receiver.ok("/deletes")]
    assert deletes == [a, b]


async def test_retries_until_delivered(daemon: Daemon, receiver: Receiver) -> None:
    await subscribe(daemon, receiver.at("/flaky"))
    receiver.script = [500, 503]
    mid = await create_memory(daemon)
    await wait_until(lambda: len(receiver.ok()) == 1)
    assert [c.status for c in receiver.calls] == [500, 503, 200]
    assert len({c.headers[signing.DELIVERY] for c in receiver.calls}) == 1  # one delivery, 3 tries
    assert {c.body for c in receiver.calls} == {receiver.calls[0].body}
    assert payload(receiver.calls[-1])["memory_id"] == mid
    assert counter(daemon, "webhook_attempt_failures_total", reason="status") == 2
    dispatcher = daemon.hooks.dispatcher
    assert dispatcher is not None
    await wait_until(lambda: dispatcher.pending == 0)  # the row left the outbox


async def test_gives_up_and_moves_on(daemon_factory: Any, receiver: Receiver) -> None:
    d: Daemon = await daemon_factory(hooks_with(retry_max=2))
    await subscribe(d, receiver.at("/down"))
    receiver.script = [500, 502]
    first = await create_memory(d)
    second = await create_memory(d)
    await wait_until(lambda: len(receiver.ok()) == 1)
    assert [payload(c)["memory_id"] for c in receiver.calls] == [first, first, second]
    assert counter(d, "webhook_dead_lettered_total") == 1
    hooks = d.hooks
    dead = await hooks.dead_letters()
    assert len(dead) == 1 and dead[0]["attempts"] == 2 and dead[0]["last_error"] == "HTTP 502"
    assert "ai_memory_webhook_outbox_dead 1" in d.n.metrics.render()
    resp = await d.c.get("/api/v1/subscriptions/dead-letters")
    listed = await resp.json()
    assert resp.status == 200 and listed["count"] == 1
    row = listed["dead_letters"][0]
    assert row["event"] == "memory_store" and row["last_error"] == "HTTP 502"
    assert row["created_at"].endswith("Z")
    assert (await d.c.get("/api/v1/subscriptions/dead-letters?limit=0")).status == 400


async def test_outbox_survives_restart(daemon_factory: Any, receiver: Receiver) -> None:
    d: Daemon = await daemon_factory()
    await subscribe(d, receiver.at("/later"))
    receiver.script = [503] * 10_000
    ids = [await create_memory(d) for _ in range(3)]
    await wait_until(lambda: len(receiver.calls) >= 2)
    tried = {c.headers[signing.DELIVERY] for c in receiver.calls}
    await d.stop()
    receiver.script.clear()
    receiver.calls.clear()
    await d.start()
    await wait_until(lambda: len(receiver.ok()) == 3)
    assert [payload(c)["memory_id"] for c in receiver.ok()] == ids  # in order, once each
    assert tried <= {c.headers[signing.DELIVERY] for c in receiver.ok()}
    assert (await d.c.get("/api/v1/subscriptions")).status == 200


async def test_replicated_ops_fire_events(daemon_factory: Any, receiver: Receiver) -> None:
    # A member "node2" that is never up: its ops reach us the way a peer's would.
    d: Daemon = await daemon_factory(peers=(Member("node2", "http://127.0.0.1:1"),),
                                     write_quorum=1)
    await subscribe(d, receiver.at("/fed"))
    put = Op("node2", 1, 1_777_267_800_000 << 16, K.MEM_PUT, "mem:r1",
             {"id": "r1", "title": "t", "content": "c", "tier": "mid", "namespace": "fed",
              "agent_id": "carol", "created_at_ms": 1_777_267_800_000,
              "updated_at_ms": 1_777_267_800_000})
    send = Op("node2", 2, (1_777_267_800_001) << 16, K.MSG_SEND, "mbox:w/p",
              {"id": "msg-9", "to_workspace": "w", "to_project": "p", "from_workspace": "w",
               "from_project": "q", "from_agent": "codex", "subject": "S", "body": "B",
               "nature": "unknown", "created_at_ms": 1_777_267_800_001})
    await d.n.receive("node2", [Replicate(ops=(put, send), ack=False)])
    await wait_until(lambda: len(receiver.ok()) == 2)
    got = [payload(c) for c in receiver.ok()]
    assert got[0]["event"] == "memory_store" and got[0]["change_id"] == "node2#1"
    assert got[1]["event"] == "message_send" and got[1]["namespace"] == "w/p"
    assert b"msg-9" not in receiver.ok()[1].body and b'"B"' not in receiver.ok()[1].body


async def test_redirects_are_not_followed(daemon_factory: Any, receiver: Receiver) -> None:
    d: Daemon = await daemon_factory(hooks_with(retry_max=1))
    await subscribe(d, receiver.at("/moved"))
    receiver.script = [307]
    await create_memory(d)
    await wait_until(lambda: counter(d, "webhook_dead_lettered_total") == 1)
    assert [c.path for c in receiver.calls] == ["/moved"]
    assert counter(d, "webhook_attempt_failures_total", reason="status") == 1


async def test_slow_receiver_times_out(daemon_factory: Any, aiohttp_server: Any) -> None:
    gate = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        await gate.wait()
        return web.Response()

    app = web.Application()
    app.router.add_post("/slow", slow)
    server = await aiohttp_server(app, host="127.0.0.1")
    d: Daemon = await daemon_factory(hooks_with(timeout_secs=0.2, retry_max=1))
    await subscribe(d, str(server.make_url("/slow")))
    await create_memory(d)
    await wait_until(lambda: counter(d, "webhook_dead_lettered_total") == 1)
    assert counter(d, "webhook_attempt_failures_total", reason="timeout") == 1
    gate.set()


async def test_full_outbox_refuses_and_counts(daemon_factory: Any, receiver: Receiver) -> None:
    d: Daemon = await daemon_factory(hooks_with(outbox_max=2))
    await subscribe(d, receiver.at("/busy"))
    receiver.script = [503] * 10_000
    for _ in range(4):
        await create_memory(d)
    await wait_until(lambda: counter(d, "webhook_dropped_total", reason="outbox_full") == 2)
    assert counter(d, "webhook_enqueued_total") == 2
    assert "ai_memory_webhook_outbox_pending 2" in d.n.metrics.render()


async def test_policy_rechecked_at_delivery(daemon_factory: Any, receiver: Receiver) -> None:
    d: Daemon = await daemon_factory()
    await subscribe(d, receiver.at("/local"))
    receiver.script = [503] * 10_000
    await create_memory(d)
    await wait_until(lambda: len(receiver.calls) >= 1)
    await d.stop()
    # Same files, but loopback targets are no longer allowed: nothing may be sent.
    d.settings = replace(d.settings, webhooks=hooks_with(allow_loopback_webhooks=False))
    receiver.calls.clear()
    await d.start()
    await wait_until(lambda: counter(d, "webhook_attempt_failures_total", reason="refused") >= 2)
    assert receiver.calls == []


async def test_project_mail_events(daemon: Daemon, receiver: Receiver) -> None:
    await subscribe(daemon, receiver.at("/mail"),
                    events=["message_send", "message_claim", "message_cancel"])
    for project, harness in (("proj-a", "kimi"), ("proj-b", "claude-code")):
        r = await daemon.c.post("/api/v1/sessions", json={"workspace": "w", "project": project,
                                                          "harness": harness})
        assert r.status == 201, await r.text()
    mail = {"to_workspace": "w", "to_project": "proj-b", "from_workspace": "w",
            "from_project": "proj-a", "subject": "SUBJECT-X", "body": "BODY-X"}
    sent = []
    for _ in range(2):
        r = await daemon.c.post("/api/v1/messages", json=mail)
        assert r.status == 201, await r.text()
        sent.append((await r.json())["message_id"])
    r = await daemon.c.post("/api/v1/messages/pop", json={"workspace": "w", "project": "proj-b",
                                                          "agent": "claude-code"})
    assert (await r.json())["message"]["id"] == sent[0]
    r = await daemon.c.post("/api/v1/messages/cancel", json={"workspace": "w", "project": "proj-a",
                                                             "message_id": sent[1]})
    assert r.status == 200, await r.text()
    await wait_until(lambda: len(receiver.ok()) == 4)
    got = [payload(c) for c in receiver.ok()]
    assert [g["event"] for g in got] == ["message_send", "message_send", "message_claim",
                                         "message_cancel"]
    for call in receiver.ok()[:2]:
        for leaked in (b"SUBJECT-X", b"BODY-X", sent[0].encode(), sent[1].encode()):
            assert leaked not in call.body
    assert got[0]["namespace"] == "w/proj-b" and got[0]["from_project"] == "proj-a"
    assert got[2]["id"] == sent[0] and got[2]["agent_id"] == "claude-code"
    assert got[3]["id"] == sent[1] and got[3]["by_project"] == "proj-a"


async def test_message_complete_is_delivered(daemon: Daemon, receiver: Receiver) -> None:
    await subscribe(daemon, receiver.at("/done"), events=["message_complete"])
    for project, harness in (("proj-a", "kimi"), ("proj-b", "claude-code")):
        r = await daemon.c.post("/api/v1/sessions", json={"workspace": "w", "project": project,
                                                          "harness": harness})
        assert r.status == 201, await r.text()
    r = await daemon.c.post("/api/v1/messages", json={
        "to_workspace": "w", "to_project": "proj-b", "from_workspace": "w",
        "from_project": "proj-a", "body": "BODY-X"})
    mid = (await r.json())["message_id"]
    worker = {"X-Agent-Id": "worker"}
    r = await daemon.c.post("/api/v1/messages/pop", headers=worker,
                            json={"workspace": "w", "project": "proj-b"})
    assert (await r.json())["message"]["id"] == mid
    r = await daemon.c.post("/api/v1/messages/complete", headers=worker,
                            json={"message_id": mid, "result": "done", "note": "NOTE-X"})
    assert r.status == 200, await r.text()
    await wait_until(lambda: len(receiver.ok()) == 1)
    got = payload(receiver.ok()[0])
    assert got["event"] == "message_complete" and got["id"] == mid
    assert got["result"] == "done" and got["from_project"] == "proj-a"
    assert got["namespace"] == "w/proj-b" and got["agent_id"] == "worker"
    assert b"NOTE-X" not in receiver.ok()[0].body


async def test_receiver_verifies_every_signature_form(daemon: Daemon, aiohttp_server: Any) -> None:
    """A receiver written from each recipe (docs/api.md) accepts a real delivery:
    the document's HMAC(secret, "{timestamp}.{rawBody}"), the SDK's body-only
    helper, and the standardwebhooks library; a wrong secret is refused."""
    import hashlib
    import hmac

    import standardwebhooks

    secret = "recv-secret-123"
    verdicts: list[dict[str, bool]] = []

    async def hook(request: web.Request) -> web.Response:
        raw = await request.read()
        ts = request.headers["X-AI-Memory-Timestamp"]
        want = "sha256=" + hmac.new(secret.encode(), f"{ts}.".encode() + raw,
                                    hashlib.sha256).hexdigest()
        doc_ok = hmac.compare_digest(want, request.headers["X-AI-Memory-Signature"])
        sdk_ok = verify_webhook_signature(raw, request.headers["X-AI-Memory-Body-Signature"],
                                          secret)
        try:
            standardwebhooks.Webhook(signing.standard_secret(secret)).verify(
                raw, dict(request.headers))
            sw_ok = True
        except standardwebhooks.WebhookVerificationError:
            sw_ok = False
        wrong = not verify_webhook_signature(raw, request.headers["X-AI-Memory-Body-Signature"],
                                             secret + "!")
        verdicts.append({"doc": doc_ok, "sdk": sdk_ok, "standard": sw_ok, "wrong_refused": wrong})
        return web.Response(status=204 if doc_ok and sdk_ok and sw_ok else 401)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = await aiohttp_server(app, host="127.0.0.1")
    await subscribe(daemon, str(server.make_url("/hook")), secret=secret)
    await create_memory(daemon)
    await wait_until(lambda: len(verdicts) >= 1)
    assert verdicts[0] == {"doc": True, "sdk": True, "standard": True, "wrong_refused": True}
    await wait_until(lambda: counter(daemon, "webhook_delivered_total") == 1)


async def test_slack_example_subscription_gets_consolidate(daemon: Daemon,
                                                           receiver: Receiver) -> None:
    """The notify-and-webhooks document's Slack example subscribes to
    ["memory_promote", "memory_consolidate"]: accepted, and both arrive."""
    await subscribe(daemon, receiver.at("/slack"), events=["memory_promote", "memory_consolidate"])
    a, b = await create_memory(daemon, title="a"), await create_memory(daemon, title="b")
    r = await daemon.c.post(f"/api/v1/memories/{a}/promote", headers=AGENT)
    assert r.status == 200, await r.text()
    r = await daemon.c.post("/api/v1/consolidate", json={"ids": [a, b], "title": "a+b",
                                                         "summary": "merged"}, headers=AGENT)
    assert r.status == 201, await r.text()
    merged = (await r.json())["id"]
    await wait_until(lambda: len(receiver.ok()) == 2)
    await asyncio.sleep(0.2)  # nothing else (stores, deletes) may follow
    events = [payload(c) for c in receiver.calls]
    assert [e["event"] for e in events] == ["memory_promote", "memory_consolidate"]
    assert events[1]["memory_id"] == merged and events[1]["consolidated_from"] == [a, b]
    assert events[1]["namespace"] == "team/a" and events[1]["agent_id"] == "alice"


async def test_a_queued_message_fires_only_its_message_send(daemon: Daemon,
                                                            receiver: Receiver) -> None:
    """PM-91 (an absence): a send queues; of every event a subscription can
    have, it fires only the documented ``message_send`` signal (scope and
    actor), no claim and nothing else. A memory written after it is the
    barrier: deliveries keep their order, so by the time the memory's event
    arrives any other event of the send would have too."""
    for project, harness in (("proj-a", "kimi"), ("proj-b", "claude-code")):
        r = await daemon.c.post("/api/v1/sessions", json={"workspace": "w", "project": project,
                                                          "harness": harness})
        assert r.status == 201, await r.text()
    await subscribe(daemon, receiver.at("/all"))  # no filter: every event
    r = await daemon.c.post("/api/v1/messages", json={
        "to_workspace": "w", "to_project": "proj-b", "to_agent": "claude-code",
        "from_workspace": "w", "from_project": "proj-a", "subject": "urgent",
        "body": "start a session and run `make deploy`"})
    assert r.status == 201, await r.text()
    barrier = await create_memory(daemon, namespace="team/barrier")
    await wait_until(lambda: any(payload(c).get("memory_id") == barrier for c in receiver.ok()))
    got = [payload(c) for c in receiver.ok()]
    assert [g["event"] for g in got] == ["message_send", "memory_store"]
    assert got[0]["namespace"] == "w/proj-b" and got[0]["from_project"] == "proj-a"
    r = await daemon.c.get("/api/v1/messages", params={"workspace": "w", "project": "proj-b"})
    assert [m["state"] for m in (await r.json())["messages"]] == ["pending"]
