"""Property-based fuzz of every HTTP endpoint of a real daemon process.

The routes come from the app itself (``build_app(...).router.routes()``),
and the field names from every request model under ``daemon/``, so a new
endpoint or field is fuzzed without touching this file. Each example sends
one request with generated path parameters, query string, headers (raw
bytes: non-UTF-8, control characters, oversize) and body (hostile JSON,
bodies that are not JSON at all, msgpack for the peer routes) and checks:

* no answer is a 5xx;
* every 4xx is a JSON object with string ``error`` and ``code``;
* a refused request writes nothing: the row count of every table of every
  SQLite file of the node, and the op log's high-water marks, are as before.

The run is derandomized with a fixed example budget (``FUZZ_EXAMPLES``, 400
by default), so CI sees the same requests every time. The same requests go
to a second daemon in keys mode (``FUZZ_KEYS_EXAMPLES``, 150 by default),
carrying no key, a wrong one, or a real key of some grant set (root
included), so the refusals of the authorization layer are held to the same
rules.
"""

from __future__ import annotations

import asyncio
import http.client
import importlib
import json
import os
import pkgutil
import re
import sqlite3
import string
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pydantic
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import daemon
from daemon.api.app import build_app
from daemon.settings import ClusterSettings, Settings, StoreSettings
from daemon.wiring import build_node
from tests.daemon.authz_fixtures import GRANT_SETS, ROOT_KEY, key_of, toml_keys
from tests.daemon.procdaemon import Proc, daemon_process
from tests.daemon.rowcounts import row_counts

pytestmark = pytest.mark.slow
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "400"))
KEYS_EXAMPLES = int(os.environ.get("FUZZ_KEYS_EXAMPLES", "150"))


# -- what to fuzz, discovered ----------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # aiohttp canonical form, e.g. /api/v1/memories/{id}

    @property
    def params(self) -> list[str]:
        return re.findall(r"{([^}:]+)(?::[^}]*)?}", self.path)


def discover_routes() -> list[Route]:
    async def routes_of_a_real_app() -> set[Route]:
        with tempfile.TemporaryDirectory() as tmp:
            settings_ = Settings(store=StoreSettings(db_path=os.path.join(tmp, "routes.db")),
                                 cluster=ClusterSettings(node_id="node1"))
            node = await build_node(settings_)
            try:
                app = build_app(node)
                return {Route(r.method, r.resource.canonical) for r in app.router.routes()
                        if r.resource is not None}
            finally:
                await node.store.close()

    return sorted(asyncio.run(routes_of_a_real_app()), key=lambda r: (r.path, r.method))


def discover_fields() -> list[str]:
    """Every field name and alias of every pydantic model under daemon/."""
    names: set[str] = set()
    for mod in pkgutil.walk_packages(daemon.__path__, "daemon."):
        if mod.name.startswith("daemon.mcp") or mod.name == "daemon.__main__":
            continue
        module = importlib.import_module(mod.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, pydantic.BaseModel) and (
                    obj.__module__ == module.__name__):
                for name, field in obj.model_fields.items():
                    names.add(name)
                    alias = field.validation_alias
                    for choice in getattr(alias, "choices", [alias]):
                        if isinstance(choice, str):
                            names.add(choice)
    return sorted(names)


ROUTES = discover_routes()
FIELDS = discover_fields()
HEADERS = ["X-Agent-Id", "X-API-Key", "Authorization", "Idempotency-Key",
           "x-memory-actor-session-id", "Content-Type", "X-AIM-Node", "X-AIM-To", "X-AIM-Ts",
           "X-AIM-Sig", "Accept", "Origin"]
# A value that would pass each field, so one mutated field reaches deeper code.
PLAUSIBLE: dict[str, Any] = {
    "agent_id": "alice", "to": "bob", "target_agent_id": "bob", "title": "t", "subject": "s",
    "payload": "p", "content": "c", "body": "b", "workspace": "default", "project": "p",
    "harness": "claude", "to_workspace": "default", "to_project": "q", "from_workspace":
    "default", "from_project": "p", "url": "http://127.0.0.1:9/h", "sender_agent_id": "peer",
    "memories": [], "deletions": [], "ids": [], "tier": "mid", "namespace": "global",
}


# Known-good bodies for some routes: a mutated copy (one field replaced,
# dropped or added) gets past the first validation and into the handler.
# Routes missing here are still fuzzed with generic bodies.
VALID: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/api/v1/notify"): {"to": "bob", "title": "t", "payload": "p", "priority": 5},
    ("POST", "/api/v1/inbox/read"): {"agent_id": "bob", "ids": ["abc"]},
    ("POST", "/api/v1/memories"): {"title": "t", "content": "c", "tier": "mid",
                                   "namespace": "global", "tags": ["a"], "metadata": {}},
    ("PUT", "/api/v1/memories/{id}"): {"title": "t2", "content": "c2", "priority": 3},
    ("POST", "/api/v1/agents"): {"agent_id": "alice", "agent_type": "claude",
                                 "capabilities": ["x"]},
    ("POST", "/api/v1/sessions"): {"workspace": "default", "project": "p", "harness": "claude"},
    ("POST", "/api/v1/messages"): {"to_workspace": "default", "to_project": "q", "body": "b",
                                   "from_workspace": "default", "from_project": "p",
                                   "subject": "s", "nature": "reported"},
    ("POST", "/api/v1/messages/pop"): {"workspace": "default", "project": "q"},
    ("POST", "/api/v1/messages/cancel"): {"workspace": "default", "project": "p", "all": True},
    ("POST", "/api/v1/subscriptions"): {"url": "http://127.0.0.1:9/h", "events": ["memory_store"]},
    ("POST", "/api/v1/sync/push"): {"sender_agent_id": "peer", "memories": [{
        "id": "m1", "title": "t", "content": "c", "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z"}], "deletions": []},
}


# -- generated values ------------------------------------------------------------------------

HOSTILE_TEXT = st.sampled_from([
    "", " ", "9" * 5000, "-" + "9" * 4301, "1e999", "NaN", "-0", "0x10", "\x00", "\u202e",
    "a" * 70_000, "../../etc/passwd", "%00", "%ff", "'; DROP TABLE notes; --", "\ud800",
    "\U0001f600" * 100, "true", "null", "[]", "{}", "2026-13-45T99:99:99Z", "9999-12-31T23:59:59Z",
])
TEXT = st.one_of(HOSTILE_TEXT, st.text(max_size=40),
                 st.text(alphabet=string.ascii_letters + string.digits + "-_.:@/", max_size=20))
NUMBER = st.one_of(st.integers(), st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30]),
                   st.floats(allow_nan=True, allow_infinity=True))
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
JSON = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(FIELDS) | TEXT, inner,
                                                 max_size=4)), max_leaves=12)


@st.composite
def json_object(draw: st.DrawFn) -> dict[str, Any]:
    """Plausible fields for this API with a few of them replaced or added."""
    obj: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=8, unique=True)):
        obj[name] = PLAUSIBLE.get(name, "x") if draw(st.booleans()) else draw(JSON)
    return obj


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any]) -> dict[str, Any]:
    obj = dict(valid)
    for _ in range(draw(st.integers(0, 2))):
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "add" or not obj:
            obj[draw(st.sampled_from(FIELDS))] = draw(JSON)
        elif action == "drop":
            obj.pop(draw(st.sampled_from(sorted(obj))))
        else:
            obj[draw(st.sampled_from(sorted(obj)))] = draw(JSON)
    return obj


def _dump(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


BODY = st.one_of(
    st.none(),
    json_object().map(_dump),
    JSON.map(_dump),
    st.binary(max_size=200),
    st.sampled_from([
        b'{"priority": ' + b"9" * 5000 + b"}",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"to": "bob", "title": "\xff\xfe"}',
        b"\xef\xbb\xbf{}",  # UTF-8 BOM
        b'{"a": 1, "a": 2}',
        b"{" + b'"k": "v", ' * 20_000 + b'"z": 0}',
        b"",
    ]),
    st.builds(lambda o: msgpack.packb(o, use_bin_type=True),
              st.recursive(st.one_of(st.none(), st.integers(-(2**63), 2**64 - 1), st.text(),
                                     st.binary(max_size=20)),
                           lambda i: st.lists(i, max_size=3) | st.dictionaries(
                               st.text(max_size=8), i, max_size=3), max_leaves=8)),
)
HEADER_VALUE = st.one_of(
    st.sampled_from([b"alice", b"bob", b"", b"\xff\xfe", b"caf\xe9", b"a" * 5000, b"\x01",
                     b"application/json", b"application/msgpack", b"text/plain", b"node2",
                     b"Bearer x", b"*", b"1" * 4400]),
    st.binary(max_size=40).filter(lambda v: b"\r" not in v and b"\n" not in v
                                  and b"\x00" not in v),
    TEXT.map(lambda s: s.encode("utf-8", "surrogatepass")).filter(
        lambda v: b"\r" not in v and b"\n" not in v and b"\x00" not in v),
)
QUERY_VALUE = st.one_of(TEXT, NUMBER.map(str), st.sampled_from(["1", "0", "true", "local"]))


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, dict[str, bytes], bytes | None]:
    route = draw(st.sampled_from(ROUTES))
    method = route.method if draw(st.integers(0, 9)) else draw(
        st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
    path = route.path
    for name in route.params:
        value = draw(st.one_of(TEXT, st.sampled_from(["abc", "x" * 300, "%2e%2e"])))
        path = re.sub("{" + re.escape(name) + "(:[^}]*)?}",
                      urllib.parse.quote(value.encode("utf-8", "surrogatepass"), safe="") or "x",
                      path)
    query = draw(st.dictionaries(st.sampled_from(FIELDS) | TEXT, QUERY_VALUE, max_size=4))
    if query:
        path += "?" + urllib.parse.urlencode(
            {k.encode("utf-8", "surrogatepass"): v.encode("utf-8", "surrogatepass")
             for k, v in query.items()})
    headers = draw(st.dictionaries(st.sampled_from(HEADERS), HEADER_VALUE, max_size=3))
    valid = VALID.get((method, route.path))
    if valid is not None and draw(st.booleans()):
        body: bytes | None = _dump(draw(mutated(valid)))
    elif method in ("POST", "PUT", "PATCH") or draw(st.integers(0, 19)) == 0:
        body = draw(BODY)
    else:
        body = None
    if valid is not None and draw(st.booleans()):
        headers.setdefault("X-Agent-Id", b"alice")
    if body is not None and "Content-Type" not in headers:
        headers["Content-Type"] = (b"application/msgpack" if route.path.startswith("/peer/")
                                   else b"application/json")
    return method, path, headers, body


# -- what must hold --------------------------------------------------------------------------


def snapshot(data: Path) -> dict[str, int]:
    """Row counts of every table, plus the op log's per-origin high-water
    marks (the op log is also garbage-collected in the background, so its
    row count may fall, never rise, and its high-water marks never move
    without a write)."""
    counts = row_counts(data)
    conn = sqlite3.connect(f"file:{data / 'node1.db'}?mode=ro", uri=True)
    try:
        for origin, watermark in conn.execute("SELECT origin, watermark FROM vv"):
            counts[f"oplog high-water:{origin}"] = watermark
    finally:
        conn.close()
    return counts


def unchanged(before: dict[str, int], after: dict[str, int]) -> bool:
    oplog = "node1.db:oplog"
    rest = lambda d: {k: v for k, v in d.items() if k != oplog}  # noqa: E731
    return rest(before) == rest(after) and after.get(oplog, 0) <= before.get(oplog, 0)


@pytest.fixture(scope="module")
def proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    with daemon_process(tmp_path_factory.mktemp("fuzz")) as p:
        yield p


@pytest.fixture(scope="module")
def keyed_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    data = tmp_path_factory.mktemp("fuzz-keys")
    (data / "node.toml").write_text(toml_keys())
    with daemon_process(data, "--config", str(data / "node.toml")) as p:
        yield p


KEY_HEADER = st.one_of(
    st.none(),
    st.sampled_from([ROOT_KEY, *(key_of(n) for n in GRANT_SETS), "k-wrong", ""]).flatmap(
        lambda key: st.sampled_from([("Authorization", f"Bearer {key}".encode()),
                                     ("X-API-Key", key.encode())])),
)


@st.composite
def keyed_requests(draw: st.DrawFn) -> tuple[str, str, dict[str, bytes], bytes | None]:
    method, path, headers, body = draw(requests())
    key = draw(KEY_HEADER)
    if key is not None:
        headers[key[0]] = key[1]
    return method, path, headers, body


def send(proc: Proc, method: str, path: str, headers: dict[str, bytes],
         body: bytes | None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        if resp.status < 400 and "event-stream" in (resp.getheader("Content-Type") or ""):
            # A stream the request opened for real (a valid agent and cursor)
            # never ends by itself: its heartbeats keep every read within the
            # socket timeout. Its headers are the answer; it is closed here.
            return resp.status, b""
        return resp.status, resp.read()
    finally:
        conn.close()


def test_routes_are_discovered() -> None:
    paths = {r.path for r in ROUTES}
    assert {"/api/v1/notify", "/api/v1/memories/{id}", "/peer/v1/msgs"} <= paths
    assert len(FIELDS) > 30


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(req=requests())
def test_every_endpoint_survives_hostile_requests(proc: Proc, req: tuple[str, str, dict[str, bytes],
                                                                         bytes | None]) -> None:
    check_one(proc, req)


@settings(max_examples=KEYS_EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(req=keyed_requests())
def test_every_endpoint_survives_hostile_requests_in_keys_mode(
        keyed_proc: Proc, req: tuple[str, str, dict[str, bytes], bytes | None]) -> None:
    check_one(keyed_proc, req)


def check_one(proc: Proc, req: tuple[str, str, dict[str, bytes], bytes | None]) -> None:
    method, path, headers, body = req
    before = snapshot(proc.data)
    try:
        status, raw = send(proc, method, path, headers, body)
    except (ConnectionError, http.client.RemoteDisconnected):
        # aiohttp's parser refused the bytes outright and dropped the connection
        assert proc.popen.poll() is None, proc.log_text()[-3000:]
        return
    where = f"{method} {path[:200]} headers={ {k: v[:60] for k, v in headers.items()} } " \
            f"body={(body or b'')[:200]!r}"
    event(f"status {status}")
    event(f"{status // 100}xx {method} {path.split('?')[0][:40]}")
    assert status < 500, f"{status} {raw[:500]!r} for {where}"
    if status >= 400:
        if method != "HEAD":
            assert raw[:1] == b"{", f"non-JSON {status} {raw[:300]!r} for {where}"
            err = json.loads(raw)
            if path.split("?")[0] == "/mcp" and err.get("jsonrpc") == "2.0":
                # The MCP transport's own refusals (no Accept for its media
                # types, a parse error) are JSON-RPC errors, as the
                # specification has them: an object with a code and a message.
                rpc = err.get("error")
                assert isinstance(rpc, dict) and isinstance(rpc.get("message"), str), (
                    f"{raw[:300]!r} for {where}")
            else:
                assert isinstance(err.get("error"), str) and isinstance(err.get("code"), str), (
                    f"{raw[:300]!r} for {where}")
        after = snapshot(proc.data)
        assert unchanged(before, after), f"{status} wrote {before} -> {after} for {where}"


def test_the_fuzzed_daemon_logged_no_error(proc: Proc, keyed_proc: Proc) -> None:
    """Runs after the fuzz (same module-scoped processes): nothing it sent was
    logged as an error or with a traceback."""
    for p in (proc, keyed_proc):
        log = p.log_text()
        assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
