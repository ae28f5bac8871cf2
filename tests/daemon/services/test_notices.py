"""The notices' count of the caller's unread notifications (``daemon/services/notices.py``)
through ``GET /handoff`` and ``GET /briefing`` on one real node: read and other agents'
notifications are not counted, at most five senders are named, never a title or body."""

from __future__ import annotations

import json
from typing import Any

from tests.daemon.services.test_mail import B, start

SECRET = "the body of a notification"


async def _notify(client: Any, sender: str, to: str = "bob") -> str:
    resp = await client.post("/api/v1/notify", json={"target_agent_id": to, "title": "T-" + sender,
                                                     "payload": SECRET},
                             headers={"X-Agent-Id": sender})
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


async def _get(client: Any, path: str, agent: str | None, **params: str) -> dict[str, Any]:
    headers = {"X-Agent-Id": agent} if agent else {}
    resp = await client.get(path, params={**B, **params}, headers=headers)
    assert resp.status == 200, await resp.text()
    return dict(await resp.json())


async def test_counts_the_callers_unread_notifications_only(client: Any) -> None:
    await start(client, B, "claude-code", "sess-b")
    quiet = await _get(client, "/handoff", "bob", inbox_only="1")
    assert quiet["notice"] is None
    assert (quiet["unread_notification_count"], quiet["notification_agent"]) == (0, "bob")
    senders = ["s1", "s2", "s3", "s4", "s5", "s6"]
    ids = [await _notify(client, s) for s in senders]
    ids.append(await _notify(client, "s6"))  # s6 sent two: named first
    await _notify(client, "s1", to="carol")

    notice = await _get(client, "/handoff", "bob", inbox_only="1")
    assert notice["unread_notification_count"] == 7
    assert notice["notification_senders"] == ["s6", "s1", "s2", "s3", "s4"]
    assert notice["notice"].startswith("\U0001f514 ai-memory: 7 unread notifications for agent "
                                       "bob (from s6, s1, s2, s3, s4 and others)")
    assert SECRET not in json.dumps(notice) and "T-s" not in json.dumps(notice)
    assert notice["pending_message_count"] == 0  # no mail: the mail line is absent
    assert "cross-project" not in notice["notice"]

    brief = await _get(client, "/api/v1/briefing", "carol")
    assert (brief["unread_notification_count"], brief["notification_senders"]) == (1, ["s1"])
    nobody = await _get(client, "/api/v1/briefing", None)
    assert nobody["unread_notification_count"] is None and nobody["notification_agent"] is None

    read = await client.post("/api/v1/inbox/read", json={"ids": ids[:6]},
                             headers={"X-Agent-Id": "bob"})
    assert read.status == 200
    left = await _get(client, "/handoff", "bob", inbox_only="1")
    assert (left["unread_notification_count"], left["notification_senders"]) == (1, ["s6"])
    assert "1 unread notification for agent bob (from s6)." in left["notice"]

    # The session start's context carries the same line.
    full = await _get(client, "/handoff", "bob", harness="claude-code")
    assert "1 unread notification for agent bob" in (full["context"] or "")
