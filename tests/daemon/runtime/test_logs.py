"""Structured logs and request ids: formatters, the HTTP boundary, and real peer calls."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from daemon.runtime.logs import QUIET_LIBRARIES, JsonFormatter, TextFormatter, configure, request_id
from tests.cluster.harness import Cluster
from tests.daemon._fixtures_handlers import snapshot


def record(msg: str, **fields: Any) -> logging.LogRecord:
    rec = logging.LogRecord("ai_memory.test", logging.WARNING, __file__, 1, msg, (), None)
    rec.fields = fields
    return rec


def test_json_lines_carry_time_level_node_event_fields_and_the_request_id() -> None:
    fmt = JsonFormatter("node7")
    token = request_id.set("rid-1")
    try:
        line = json.loads(fmt.format(record("peer call failed", peer="node2", ms=3.5)))
    finally:
        request_id.reset(token)
    assert line["level"] == "warning" and line["node"] == "node7"
    assert line["event"] == "peer call failed" and line["request_id"] == "rid-1"
    assert line["fields"] == {"peer": "node2", "ms": 3.5}
    assert line["time"].endswith("Z") and "T" in line["time"]
    assert "request_id" not in json.loads(fmt.format(record("idle")))  # outside a request
    text = TextFormatter("node7").format(record("peer call failed", peer="node2"))
    assert text.endswith("ai_memory.test: peer call failed peer=node2")


@pytest.fixture
def root_logging() -> Any:
    """Whatever :func:`configure` changes, put back (pytest's own handlers included)."""
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_the_mcp_librarys_info_chatter_is_quiet_but_its_errors_are_not(
        root_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    """The stateless /mcp endpoint made the SDK log "Terminating session: None"
    at INFO on every request; its warnings and errors still show."""
    transport = logging.getLogger("mcp.server.streamable_http")
    configure("info", "text", "node1")
    transport.info("Terminating session: None")
    transport.error("Error handling POST request")
    logging.getLogger("mcp.server.streamable_http_manager").warning("Refusing to open a session")
    logging.getLogger("ai_memory.server").info("serving")
    err = capsys.readouterr().err
    assert "Terminating session" not in err
    assert "ERROR mcp.server.streamable_http: Error handling POST request" in err
    assert "WARNING mcp.server.streamable_http_manager: Refusing" in err
    assert "INFO ai_memory.server: serving" in err
    configure("debug", "text", "node1")  # asked for everything: the chatter comes back
    transport.info("Terminating session: None")
    assert "INFO mcp.server.streamable_http: Terminating session: None" in capsys.readouterr().err


async def test_the_request_id_is_taken_or_made_and_returned(client: Any, node: Any) -> None:
    resp = await client.get("/api/v1/health", headers={"X-Request-Id": "caller-42"})
    assert resp.status == 200 and resp.headers["X-Request-Id"] == "caller-42"
    made = (await client.get("/api/v1/health")).headers["X-Request-Id"]
    assert len(made) == 16 and made != (await client.get("/api/v1/health")).headers["X-Request-Id"]
    missing = await client.get("/api/v1/nowhere", headers={"X-Request-Id": "r-404"})
    assert missing.status == 404 and missing.headers["X-Request-Id"] == "r-404"
    before = await snapshot(node)
    for bad in ("x" * 129, "has space", "semi;colon"):
        resp = await client.post("/api/v1/notify", headers={"X-Request-Id": bad,
                                                              "X-Agent-Id": "alice"},
                                 json={"target_agent_id": "bob", "title": "t"})
        assert resp.status == 400, bad
        body = await resp.json()
        assert body["code"] == "bad_request_id" and "X-Request-Id" in body["error"]
    assert await snapshot(node) == before  # refused before anything was written


@pytest.mark.cluster
@pytest.mark.timeout(90)
def test_a_request_id_follows_the_peer_calls_it_causes(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 2, write_quorum=1)  # R = N - W + 1 = 2: a quorum read pulls from the peer
    for p in c.procs.values():
        p.extra_env = {"AI_MEMORY_LOG_FORMAT": "json", "AI_MEMORY_LOG_LEVEL": "debug"}
    try:
        c.start()
        code, _ = c.call("node1", "GET", "/api/v1/inbox?agent_id=bob&consistency=quorum",
                         headers={"X-Agent-Id": "bob", "X-Request-Id": "trace-me-7"})
        assert code == 200

        def lines(nid: str) -> list[dict[str, Any]]:
            raw = c.procs[nid].log.read_text().splitlines()
            return [json.loads(r) for r in raw if r.startswith("{")]

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ours = [r for r in lines("node1") if r.get("request_id") == "trace-me-7"]
            theirs = [r for r in lines("node2") if r.get("request_id") == "trace-me-7"]
            if any(r["event"] == "peer call" for r in ours) and theirs:
                break
            time.sleep(0.1)
        call = next(r for r in ours if r["event"] == "peer call")
        assert call["node"] == "node1" and call["fields"]["peer"] == "node2"
        assert call["fields"]["path"] == "/peer/v1/pull" and call["fields"]["status"] == 200
        served = next(r for r in theirs if r["event"] == "http request")
        assert served["node"] == "node2" and served["fields"]["path"] == "/peer/v1/pull"
        assert any(r["event"] == "http request" and r["fields"]["path"] == "/api/v1/inbox"
                   for r in ours)
        # Every line of both logs is one JSON object with the five parts.
        for nid in c.ids:
            raw = [r for r in c.procs[nid].log.read_text().splitlines() if r.strip()]
            for text in raw:
                obj = json.loads(text)
                assert {"time", "level", "node", "event", "fields"} <= obj.keys(), text
    finally:
        c.stop()
