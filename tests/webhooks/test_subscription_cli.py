"""``ai-memory subscription ...`` against a real node: add, list, a delivery
that dies, its replay, remove. The CLI is synchronous, so it runs in a
thread while the node serves on this loop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import cli
from daemon.webhooks import signing
from tests.webhooks.conftest import Daemon, Receiver, hooks_with, wait_until


@pytest.fixture(autouse=True)
def no_ambient_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AI_MEMORY_URL", "AI_MEMORY_AGENT_ID", "AI_MEMORY_API_KEY", "AI_MEMORY_KEY"):
        monkeypatch.delenv(name, raising=False)


async def run(d: Daemon, *args: str) -> Result:
    url = str(d.c.make_url("")).rstrip("/")
    argv = ["--url", url, "--agent-id", "alice", "subscription", *args]
    return await asyncio.to_thread(CliRunner().invoke, cli, argv)


async def ok(d: Daemon, *args: str) -> str:
    result = await run(d, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


async def test_add_list_replay_remove(daemon_factory: Any, receiver: Receiver) -> None:
    d: Daemon = await daemon_factory(hooks_with(retry_max=1))
    made = json.loads(await ok(d, "add", receiver.at("/cli"), "--events",
                               "memory_store,agent_notified", "--namespace-filter", "team/a",
                               "--agent-filter", "alice", "--signature-version", "sha256-key",
                               "--json"))
    assert made["events"] == ["memory_store", "agent_notified"] and made["secret"]
    assert (made["namespace_filter"], made["agent_filter"], made["signature_version"]) == (
        "team/a", "alice", "sha256-key")
    plain = await ok(d, "add", receiver.at("/other"), "--secret", "s")
    assert plain.startswith("subscribed ") and "secret:" not in plain
    generated = await ok(d, "add", receiver.at("/third"))
    assert "secret: " in generated
    listing = await ok(d, "list")
    assert made["id"] in listing and "memory_store,agent_notified" in listing
    assert "sha256-key" in listing and "team/a" in listing
    subs = json.loads(await ok(d, "list", "--json"))["subscriptions"]
    assert [s["events"] for s in subs] == [["memory_store", "agent_notified"], [], []]

    receiver.script = [500, 500, 500]  # the three subscriptions' first deliveries die
    r = await d.c.post("/api/v1/memories", json={"title": "t", "content": "c",
                                                 "namespace": "team/a"},
                       headers={"X-Agent-Id": "alice"})
    assert r.status == 201
    await wait_until(lambda: d.hooks.dispatcher is not None and d.hooks.dispatcher.dead == 3)
    dead = json.loads(await ok(d, "dead-letters", "--json"))["dead_letters"]
    assert len(dead) == 3
    shown = await ok(d, "dead-letters")
    assert all(row["delivery_id"] in shown for row in dead) and "HTTP 500" in shown
    mine = next(row for row in dead if row["sub_id"] == made["id"])
    other = next(row for row in dead if row["sub_id"] != made["id"])
    out = await ok(d, "replay", mine["delivery_id"], str(other["seq"]))  # by id, by seq
    assert out.count("replayed ") == 2
    await wait_until(lambda: len(receiver.ok()) == 2)
    assert receiver.ok("/cli")[0].headers[signing.DELIVERY] == mine["delivery_id"]
    assert len(json.loads(await ok(d, "dead-letters", "--json"))["dead_letters"]) == 1

    bad = await run(d, "replay", mine["delivery_id"])
    assert bad.exit_code == 3 and "not found" in bad.output
    gone = await ok(d, "remove", made["id"], subs[1]["id"])
    assert gone.count("removed ") == 2
    left = json.loads(await ok(d, "list", "--json"))["subscriptions"]
    assert [s["id"] for s in left] == [subs[2]["id"]]
    again = await run(d, "remove", made["id"])
    assert again.exit_code == 3


async def test_bad_events_exit_2_and_write_nothing(daemon: Daemon, receiver: Receiver) -> None:
    result = await run(daemon, "add", receiver.at("/x"), "--events", "memory_archive")
    assert result.exit_code == 2 and "unknown event 'memory_archive'" in result.output
    assert json.loads(await ok(daemon, "list", "--json"))["count"] == 0
