"""Hostile input found by probing a running daemon: each is a 4xx JSON
error ``{"error", "code"}`` that writes nothing (row counts of every table
unchanged), never a 500. Raw sockets carry what an HTTP client library
would refuse to send (non-UTF-8 header bytes, bodies on GET/CONNECT)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.procdaemon import daemon_process
from tests.daemon.rowcounts import row_counts

NOTIFY = {"to": "bob", "title": "t", "payload": "p"}
BIG_INT = "9" * 5000  # past Python's 4,300-digit int-string limit


async def raw(client: Any, data: bytes, wait_s: float = 5.0) -> bytes:
    """Send bytes on a fresh connection; everything the server sends back
    until it closes (or the timeout)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(data)
    await writer.drain()
    out = b""
    try:
        async with asyncio.timeout(wait_s):
            while chunk := await reader.read(65536):
                out += chunk
    except TimeoutError:
        pass
    writer.close()
    return out


def responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Split a byte stream into (status, headers, body) by Content-Length."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in
                   (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        n = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out


def request(method: str, path: str, headers: dict[str, bytes] | None = None,
            body: bytes | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1"]
    for k, v in (headers or {}).items():
        lines.append(k.encode() + b": " + v)
    if body is not None and not any(k.lower() in ("content-length", "transfer-encoding")
                                    for k in (headers or {})):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def data_dir(node: Any) -> Path:
    return Path(node.settings.store.db_path).parent


def assert_error(status: int, body: bytes, expect: int = 400) -> dict[str, Any]:
    assert status == expect, body
    err = json.loads(body)
    assert isinstance(err["error"], str) and err["error"]
    assert isinstance(err["code"], str) and err["code"]
    return err  # type: ignore[no-any-return]


# -- integers past the digit limit --------------------------------------------------

JSON_ROUTES = [
    ("POST", "/api/v1/notify", lambda n: {**NOTIFY, "priority": n}),
    ("POST", "/api/v1/memories", lambda n: {"title": "t", "content": "c", "metadata": {"n": n}}),
    ("POST", "/api/v1/memories/bulk", lambda n: [{"title": "t", "content": "c", "priority": n}]),
    ("PUT", "/api/v1/memories/abc", lambda n: {"priority": n}),
    ("POST", "/api/v1/agents", lambda n: {"agent_id": "alice", "x": [n]}),
    ("POST", "/api/v1/sessions", lambda n: {"workspace": "w", "project": "p", "harness": n}),
    ("POST", "/api/v1/messages", lambda n: {"to_workspace": "w", "to_project": n, "body": "b"}),
    ("POST", "/api/v1/messages/pop", lambda n: {"workspace": "w", "project": "p", "x": n}),
    ("POST", "/api/v1/messages/cancel", lambda n: {"message_id": n}),
    ("POST", "/api/v1/subscriptions", lambda n: {"url": "http://93.184.216.34/", "n": n}),
    ("POST", "/api/v1/sync/push", lambda n: {"sender_agent_id": "p", "memories": [], "n": n}),
]


@pytest.mark.parametrize(("method", "path", "make"), JSON_ROUTES,
                         ids=[f"{m} {p}" for m, p, _ in JSON_ROUTES])
@pytest.mark.parametrize("sign", ["", "-"])
async def test_integer_past_the_digit_limit_is_a_400(client, node, method, path, make,  # type: ignore[no-untyped-def]
                                                     sign) -> None:
    before = row_counts(data_dir(node))
    marker = 123456789
    body = json.dumps(make(marker)).replace(str(marker), sign + BIG_INT).encode()
    resp = await client.request(method, path, data=body, headers={
        "Content-Type": "application/json", "X-Agent-Id": "alice"})
    err = assert_error(resp.status, await resp.read())
    assert "number" in err["error"]
    assert row_counts(data_dir(node)) == before


# -- header values that are not UTF-8, or not the shape they must have --------------------

MAIL_ROUTES = [
    ("POST", "/api/v1/sessions", {"workspace": "w", "project": "p", "harness": "h"}),
    ("POST", "/api/v1/messages", {"to_workspace": "w", "to_project": "p", "body": "b",
                                  "from_workspace": "w", "from_project": "q"}),
    ("GET", "/api/v1/messages?workspace=w&project=p", None),
    ("POST", "/api/v1/messages/pop", {"workspace": "w", "project": "p"}),
    ("POST", "/api/v1/messages/cancel", {"workspace": "w", "project": "p", "all": True}),
    ("GET", "/api/v1/handoff?workspace=w&project=p", None),
    ("GET", "/api/v1/briefing?workspace=w&project=p", None),
]
BAD_BYTES = [b"\xff\xfe", b"caf\xe9", b"\xc3\x28", b"ok-\xed\xa0\x80"]


@pytest.mark.parametrize(("method", "path", "body"), MAIL_ROUTES,
                         ids=[f"{m} {p}" for m, p, _ in MAIL_ROUTES])
@pytest.mark.parametrize("value", BAD_BYTES)
async def test_non_utf8_session_header_is_a_400(client, node, method, path, body,  # type: ignore[no-untyped-def]
                                                value) -> None:
    before = row_counts(data_dir(node))
    raw_body = json.dumps(body).encode() if body is not None else None
    headers = {"x-memory-actor-session-id": value, "Connection": b"close"}
    if raw_body is not None:
        headers["Content-Type"] = b"application/json"
    [(status, _, out)] = responses(await raw(client, request(method, path, headers, raw_body)))
    err = assert_error(status, out)
    assert err["code"] == "bad_header" and err["header"] == "x-memory-actor-session-id"
    assert row_counts(data_dir(node)) == before


@pytest.mark.parametrize("header", ["X-Agent-Id", "Idempotency-Key", "X-API-Key",
                                    "Authorization", "User-Agent", "X-Whatever"])
@pytest.mark.parametrize("value", [b"\xff", b"bob\x80", b"a\x01b", b"a\x7fb"])
async def test_hostile_value_in_any_header_is_a_400(client, node, header, value) -> None:  # type: ignore[no-untyped-def]
    before = row_counts(data_dir(node))
    headers = {header: value, "Content-Type": b"application/json", "Connection": b"close"}
    data = await raw(client, request("POST", "/api/v1/notify", headers, json.dumps(NOTIFY).encode()))
    if not data:  # the HTTP parser itself refused the bytes and closed
        pytest.skip("refused by aiohttp's parser")
    [(status, _, out)] = responses(data)
    assert status == 400, out
    if out.startswith(b"{"):
        assert json.loads(out)["code"] == "bad_header"
    assert row_counts(data_dir(node)) == before


@pytest.mark.parametrize("value", ["x" * 129, "has space", "semi;colon", "ünïcode", "a,b"])
async def test_session_header_of_the_wrong_shape_is_a_400(client, node, value) -> None:  # type: ignore[no-untyped-def]
    before = row_counts(data_dir(node))
    headers = {"x-memory-actor-session-id": value.encode(), "Connection": b"close"}
    [(status, _, out)] = responses(await raw(
        client, request("GET", "/api/v1/messages?workspace=w&project=p", headers)))
    err = assert_error(status, out)
    assert "x-memory-actor-session-id" in err["error"]
    assert row_counts(data_dir(node)) == before


async def test_utf8_header_values_still_work(client) -> None:  # type: ignore[no-untyped-def]
    headers = {"X-Agent-Id": b"alice", "User-Agent": "agent \u00e9\u4e2d".encode(),
               "Content-Type": b"application/json", "Connection": b"close"}
    [(status, _, out)] = responses(await raw(
        client, request("POST", "/api/v1/notify", headers, json.dumps(NOTIFY).encode())))
    assert status == 201, out


# -- a body declared on a method that carries none ----------------------------------------


def smuggled() -> bytes:
    body = json.dumps({**NOTIFY, "payload": "smuggled"}).encode()
    return request("POST", "/api/v1/notify", {"X-Agent-Id": b"mallory",
                                              "Content-Type": b"application/json"}, body)


@pytest.mark.parametrize("method", ["GET", "HEAD", "DELETE", "CONNECT", "OPTIONS"])
@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_body_on_a_bodyless_method_is_refused_not_pipelined(client, node, method,  # type: ignore[no-untyped-def]
                                                                  framing) -> None:
    before = row_counts(data_dir(node))
    inner = smuggled()
    path = "/api/v1/memories/abc" if method == "DELETE" else "/api/v1/health"
    if framing == "length":
        data = request(method, path, {"Content-Length": str(len(inner)).encode()}) + inner
    else:
        data = request(method, path, {"Transfer-Encoding": b"chunked"}) + (
            f"{len(inner):x}\r\n".encode() + inner + b"\r\n0\r\n\r\n")
    out = await raw(client, data)
    got = responses(out) if method != "HEAD" else [(int(out.split()[1]), {}, b"")]
    assert len(got) == 1, out  # one answer: the smuggled request was never run
    status, _, body = got[0]
    assert status == 400, out
    if method != "HEAD":
        assert json.loads(body)["code"] == "unexpected_body"
    assert b"connection: close" in out.lower()
    assert row_counts(data_dir(node)) == before


async def test_empty_declared_body_on_get_is_fine(client) -> None:  # type: ignore[no-untyped-def]
    out = await raw(client, request("GET", "/api/v1/health",
                                    {"Content-Length": b"0", "Connection": b"close"}))
    [(status, _, _)] = responses(out)
    assert status == 200


# -- a client that hangs up mid-body ------------------------------------------------------------
# The production server (not the test client's, which cancels handlers on
# disconnect) hands the handler a ConnectionResetError: a real process.


@pytest.mark.slow  # a real daemon process per case
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_hang_up_mid_body_is_logged_at_debug(tmp_path: Path, framing: str) -> None:
    with daemon_process(tmp_path, "--log-level", "debug") as proc:
        before = row_counts(proc.data)
        if framing == "length":
            head = request("POST", "/api/v1/notify", {"Content-Type": b"application/json",
                                                      "Content-Length": b"100000"})
            part = b'{"to": "bob", '
        else:
            head = request("POST", "/api/v1/notify", {"Content-Type": b"application/json",
                                                      "Transfer-Encoding": b"chunked"})
            part = b'e\r\n{"to": "bob", \r\n'
        with socket.create_connection(("127.0.0.1", proc.port)) as s:
            s.sendall(head + part)
            time.sleep(0.2)
        deadline = time.monotonic() + 10
        while "client disconnected" not in proc.log_text():
            assert time.monotonic() < deadline, proc.log_text()[-3000:]
            time.sleep(0.05)
        log = proc.log_text()
        line = next(ln for ln in log.splitlines() if "client disconnected" in ln)
        assert " DEBUG " in line, line
        assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
        assert row_counts(proc.data) == before


# -- the Server header ----------------------------------------------------------------------


async def test_server_header_names_no_versions(client) -> None:  # type: ignore[no-untyped-def]
    for resp in (await client.get("/api/v1/health"), await client.get("/no/such/route"),
                 await client.post("/api/v1/notify", data=b"{")):
        server = resp.headers.get("Server", "")
        assert server == "ai-memory", server
    # aiohttp's own answer to a request it cannot parse takes the same default
    out = await raw(client, b"GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")
    assert out.startswith(b"HTTP/1.") and b" 400 " in out.split(b"\r\n")[0]
    assert b"aiohttp" not in out.lower() and b"python" not in out.lower()


# -- requests aiohttp's own parser refuses (the production runner) ----------------------------


@pytest.mark.slow  # a real daemon process per case
@pytest.mark.parametrize("data", [
    b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-Agent-Id: a\x01b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
    b"G\x00T / HTTP/1.1\r\n\r\n",
    b"GET /api/v1/health HTTP/9.9\r\n\r\n",
    b"POST /api/v1/notify HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    b"POST /api/v1/notify HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
])
def test_unparsable_requests_get_json_and_a_quiet_log(tmp_path: Path, data: bytes) -> None:
    with daemon_process(tmp_path) as proc:
        with socket.create_connection(("127.0.0.1", proc.port)) as s:
            s.settimeout(5)
            s.sendall(data)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        [(status, headers, body)] = responses(out)
        assert 400 <= status < 500, out
        err = assert_error(status, body, status)
        assert err["code"] == "bad_http_request"
        assert headers["server"] == "ai-memory"  # and the server closed: we read to EOF
        time.sleep(0.2)
        log = proc.log_text()
        assert "Traceback" not in log and " ERROR " not in log, log[-2000:]
