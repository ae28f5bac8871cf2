"""The official SDK (``ai-memory-mcp``, imported as ``ai_memory``) against a
real ``ai-memory serve`` process: every call it makes must be answered in
the shapes its pydantic models parse, and its error classes must map from
our statuses.

One daemon serves the whole module (spawning costs a second or two); each
test uses its own agent names so the tests stay independent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ai_memory import AiMemoryClient, AsyncAiMemoryClient
from ai_memory.errors import ForbiddenError, NotFoundError, ValidationError
from ai_memory.models import AgentRegistration, InboxMessage, Memory, NotifyRequest, UpdateMemory

from tests.cluster.harness import free_port as below_ephemeral

ROOT = Path(__file__).resolve().parents[3]
READY_SECS = 20.0


def _free_port() -> int:
    """A free port below the kernel's ephemeral range (tests.cluster.harness.free_port):
    a client polling a port of that range nobody listens on yet can connect
    to itself."""
    return below_ephemeral()


def _serve_cmd(port: int, db: Path) -> list[str]:
    script = shutil.which("ai-memory", path=str(Path(sys.executable).parent))
    head = [script] if script else [sys.executable, "-m", "cli"]
    return [*head, "serve", "--host", "127.0.0.1", "--port", str(port), "--db", str(db)]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_SECS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/api/v1/health", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"daemon not healthy in {READY_SECS}s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def daemon_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("sdk")
    port = _free_port()
    log = tmp / "daemon.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(_serve_cmd(port, tmp / "sdk.db"), cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_health(daemon_url: str) -> None:
    with AiMemoryClient(daemon_url) as c:
        h = c.health()
    assert h["status"] == "ok" and h["service"] == "ai-memory"
    assert h["federation_enabled"] is False and h["node_id"]


def test_register_and_list_agents(daemon_url: str) -> None:
    me = _name("agent")
    with AiMemoryClient(daemon_url, agent_id=me) as c:
        out = c.register_agent(me, "claude-code", ["notify", "inbox"])
        AgentRegistration.model_validate(out)
        agents = {a.agent_id: a for a in c.agents()}
        assert agents[me].agent_type == "claude-code"
        assert agents[me].capabilities == ["notify", "inbox"]
        other = _name("someone-else")  # anonymous mode: any id may be registered
        assert c.register_agent(other, "claude-code")["agent_id"] == other


def test_notify_and_inbox(daemon_url: str) -> None:
    alice, bob = _name("alice"), _name("bob")
    with AiMemoryClient(daemon_url, agent_id=alice) as a, \
            AiMemoryClient(daemon_url, agent_id=bob) as b:
        sent = a.notify({"to": bob, "subject": "review", "body": "please look"})
        assert sent["from"] == alice and sent["to"] == bob and sent["delivered_to"] == bob
        sent2 = a.notify(NotifyRequest(to=bob, subject="review", body="second"))
        assert sent2["id"] != sent["id"]  # same subject, its own record
        a.notify({"target_agent_id": bob, "title": "urgent", "payload": "now", "priority": 9})

        rows = b.inbox(agent_id=bob)
        msgs = [InboxMessage.model_validate(r) for r in rows]
        assert [m.subject for m in msgs] == ["urgent", "review", "review"]
        assert {m.from_ for m in msgs} == {alice} and not any(m.read for m in msgs)
        assert {m.body for m in msgs} == {"please look", "second", "now"}
        assert len(b.inbox(limit=1)) == 1
        assert b.inbox(unread_only=False, limit=500) == rows
        with pytest.raises(ForbiddenError):
            a.inbox(agent_id=bob)
        with pytest.raises(ValidationError):
            a.notify({"to": bob, "subject": "x", "body": "y", "priority": "high"})


def test_memory_lifecycle(daemon_url: str) -> None:
    me = _name("writer")
    ns = _name("ns")
    with AiMemoryClient(daemon_url, agent_id=me) as c:
        created = c.store(title="design notes", content="quorum W=2", namespace=ns,
                          tags=["design", "quorum"], priority=7, tier="short")
        mem = Memory.model_validate(created)
        assert mem.metadata["agent_id"] == me and mem.expires_at is not None

        got = c.get(mem.id)
        assert got.title == "design notes" and got.tags == ["design", "quorum"]
        listed = c.list(namespace=ns, tags="design")
        assert [m.id for m in listed] == [mem.id]
        assert c.list(namespace=ns, min_priority=8) == []

        updated = c.update(mem.id, UpdateMemory(content="quorum W=2, R=2"))
        assert updated["content"] == "quorum W=2, R=2" and updated["title"] == "design notes"
        updated = c.update(mem.id, {"priority": 9})
        assert updated["priority"] == 9

        promoted = c.promote(mem.id)
        assert promoted["tier"] == "long" and promoted["expires_at"] is None
        assert c.get(mem.id).tier.value == "long"

        assert c.delete(mem.id)["deleted"] is True
        with pytest.raises(NotFoundError):
            c.get(mem.id)
        with pytest.raises(NotFoundError):
            c.delete(mem.id)
        assert c.list(namespace=ns) == []


def test_bulk_store(daemon_url: str) -> None:
    ns = _name("bulk")
    with AiMemoryClient(daemon_url, agent_id=_name("bulker")) as c:
        out = c.bulk_store([{"title": f"m{i}", "content": "x", "namespace": ns} for i in range(20)]
                           + [{"title": "", "content": "bad"}])
        assert out.created == 20 and len(out.ids) == 20
        assert [e["index"] for e in out.errors] == [20]
        listed = c.list(namespace=ns, limit=100)
        assert sorted(m.id for m in listed) == sorted(out.ids)


async def test_async_client(daemon_url: str) -> None:
    alice, bob = _name("alice"), _name("bob")
    async with AsyncAiMemoryClient(daemon_url, agent_id=alice) as a:
        await a.notify({"to": bob, "subject": "async", "body": "hello"})
        mem = await a.store(title="async memory", content="c")
    async with AsyncAiMemoryClient(daemon_url, agent_id=bob) as b:
        rows = await b.inbox()
        assert [r["subject"] for r in rows] == ["async"]
        assert (await b.get(mem["id"])).title == "async memory"
