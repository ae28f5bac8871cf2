"""The HTTP client: headers sent, error bodies mapped to the error tree, transport failures."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from cli.client import ApiClient, CannotConnect, TransportFailed
from common.errors import (
    BadRequest,
    ClientError,
    Conflict,
    Forbidden,
    LimitExceeded,
    NoMajority,
    NotFound,
    PayloadTooLarge,
    QuorumNotMet,
    ServerError,
    Unauthorized,
    Unavailable,
)
from tests.cli.stub import StubDaemon
from tests.cluster.harness import free_port


def test_sends_identity_headers_and_drops_unset_params(stub: StubDaemon) -> None:
    stub.reply("GET", "/api/v1/inbox", {"messages": []})
    client = ApiClient(stub.url, agent_id="alice", api_key="k1")
    assert client.get("/api/v1/inbox", agent_id="alice", unread_only=False, limit=None) == {
        "messages": []
    }
    sent = stub.last()
    assert sent.headers["X-Agent-Id"] == "alice"
    assert sent.headers["X-API-Key"] == "k1"
    assert sent.query == {"agent_id": "alice", "unread_only": "false"}


def test_given_both_keys_sends_only_the_bearer_key(stub: StubDaemon) -> None:
    # A node refuses Authorization and X-API-Key that differ (401): one key goes, as from
    # ``ai-memory mcp`` (common.clients.key_headers).
    stub.reply("GET", "/api/v1/agents", {"agents": []})
    ApiClient(stub.url, api_key="k_old", key="aim_new").get("/api/v1/agents")
    sent = stub.last().headers
    assert sent["Authorization"] == "Bearer aim_new"
    assert "X-API-Key" not in sent
    ApiClient(stub.url, api_key="k_old").get("/api/v1/agents")
    assert stub.last().headers["X-API-Key"] == "k_old"
    assert "Authorization" not in stub.last().headers


@pytest.mark.parametrize(
    ("status", "body", "cls", "exit_code"),
    [
        (400, {"error": "bad tier", "code": "bad_request"}, BadRequest, 2),
        (401, {"error": "no key", "code": "unauthorized"}, Unauthorized, 2),
        (403, {"error": "not yours", "code": "forbidden"}, Forbidden, 2),
        (404, {"error": "no project", "code": "not_found"}, NotFound, 3),
        (409, {"error": "refusing to pop", "code": "conflict"}, Conflict, 4),
        (413, {"error": "too big", "code": "payload_too_large"}, PayloadTooLarge, 2),
        (
            429,
            {"error": "mailbox full", "code": "limit_exceeded", "limit": "mailbox_pending_max"},
            LimitExceeded,
            5,
        ),
        (503, {"error": "overloaded", "code": "unavailable"}, Unavailable, 6),
        (503, {"error": "minority side", "code": "no_majority"}, NoMajority, 6),
        (422, {"error": "odd"}, ClientError, 2),
        (500, "Internal Server Error", ServerError, 6),
    ],
)
def test_error_statuses_map_to_the_error_tree(
    stub: StubDaemon, status: int, body: object, cls: type, exit_code: int
) -> None:
    stub.reply("POST", "/api/v1/notify", body, status=status)
    with pytest.raises(cls) as caught:
        ApiClient(stub.url).post("/api/v1/notify", {"x": 1})
    assert type(caught.value) is cls
    assert caught.value.exit_code == exit_code
    assert caught.value.details["status"] == status
    if isinstance(body, dict):
        assert caught.value.message == body["error"]
        assert caught.value.code == body.get("code", cls.code)
    else:
        assert caught.value.message == body


def test_quorum_not_met_keeps_counts_and_retry_after(stub: StubDaemon) -> None:
    stub.reply(
        "POST",
        "/api/v1/notify",
        {"error": "quorum_not_met", "got": 1, "needed": 2, "reason": "timeout"},
        status=503,
        headers={"Retry-After": "2"},
    )
    with pytest.raises(QuorumNotMet) as caught:
        ApiClient(stub.url).post("/api/v1/notify", {})
    assert caught.value.details["got"] == 1
    assert caught.value.details["needed"] == 2
    assert caught.value.retry_after == 2.0


def _closed_port() -> int:
    """Nothing listens there; below the ephemeral range, so a connection to it
    is never given it as its own source port (and connects to itself)."""
    return free_port()


def test_refused_connection_is_cannot_connect_exit_7() -> None:
    port = _closed_port()
    with pytest.raises(CannotConnect) as caught:
        ApiClient(f"http://127.0.0.1:{port}").get("/api/v1/health")
    assert caught.value.exit_code == 7
    assert str(port) in caught.value.message


@pytest.fixture
def hangup_server() -> Iterator[str]:
    """Accepts connections, reads the request, closes without answering."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.05)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    done.set()
    thread.join(5)
    listener.close()


def test_connection_dropped_mid_request_is_transport_failure_exit_6(hangup_server: str) -> None:
    with pytest.raises(TransportFailed) as caught:
        ApiClient(hangup_server).post("/api/v1/messages/pop", {})
    assert caught.value.exit_code == 6
    assert isinstance(caught.value, Unavailable)


def test_retrying_once_repeats_after_503_then_gives_up(stub: StubDaemon) -> None:
    stub.reply(
        "POST",
        "/x",
        {"error": "busy", "code": "unavailable"},
        status=503,
        headers={"Retry-After": "30"},
    )
    waits: list[float] = []
    client = ApiClient(stub.url, sleep=waits.append)
    with pytest.raises(Unavailable):
        client.retrying_once(lambda: client.post("/x", {}))
    assert len([r for r in stub.requests if r.path == "/x"]) == 2
    assert waits == [5.0]  # Retry-After capped at limits.cli_retry_wait_max_secs


def test_retrying_once_does_not_repeat_client_errors(stub: StubDaemon) -> None:
    stub.reply("POST", "/x", {"error": "no", "code": "conflict"}, status=409)
    client = ApiClient(stub.url, sleep=lambda _s: None)
    with pytest.raises(Conflict):
        client.retrying_once(lambda: client.post("/x", {}))
    assert len(stub.requests) == 1
