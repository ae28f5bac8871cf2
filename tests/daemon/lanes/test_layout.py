"""Lanes, the pure parts: where a lane lives, which lanes a write goes to,
lane-aligned ids, and a rule for every route (daemon/lanes/, common/lanes.py)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from aiohttp import web

from common.errors import ClusterMismatch
from common.lanes import (
    GLOBAL_KINDS,
    PARTITION_VERSION,
    id_fits,
    lane_of,
    lane_of_id,
    lanes_of_item,
    mint,
)
from common.ops import (
    APIKEY_PUT,
    MSG_SEND,
    NOTE_NEW,
    NSUB_PUT,
    SESSION_START,
    agent_key,
    inbox_key,
    mailbox_key,
    mem_key,
)
from daemon.api import ROUTE_MODULES
from daemon.http.appkeys import NODE
from daemon.lanes import rules, table  # noqa: F401  (fills the rules)
from daemon.lanes.layout import (
    check_layout,
    lane_db_path,
    lane_settings,
    lane_url,
    layout_value,
)
from daemon.lanes.split import split_items
from daemon.schemas.ids import record_id
from daemon.settings import load_settings


def test_a_lanes_place() -> None:
    assert lane_url("http://10.0.0.2:9077", 0, 100) == "http://10.0.0.2:9177"
    assert lane_url("https://n2.example:9443/", 2, 10) == "https://n2.example:9473/"
    assert lane_url("http://[::1]:9077", 1, 100) == "http://[::1]:9277"
    assert lane_db_path("/var/lib/ai-memory/node.db", 0) == "/var/lib/ai-memory/node.db"
    assert lane_db_path("/var/lib/ai-memory/node.db", 3) == "/var/lib/ai-memory/node.lane3.db"


def test_lane_settings() -> None:
    s = load_settings({"port": 9077, "lanes": 2, "db": "/d/n.db",
                       "quorum_peers": "b=http://127.0.0.1:9078,c=http://127.0.0.1:9079"},
                      env={})
    one = lane_settings(s, 1)
    assert one.server.lane == 1 and one.server.peer_port == 9077 + 200
    assert one.store.db_path == "/d/n.lane1.db"
    assert [p.url for p in one.cluster.peers] == ["http://127.0.0.1:9278", "http://127.0.0.1:9279"]
    assert one.cluster.cluster_id.endswith(f".lane1of2p{PARTITION_VERSION}")
    assert lane_settings(s, 0).cluster.cluster_id.endswith(f".lane0of2p{PARTITION_VERSION}")
    plain = load_settings({"port": 9077}, env={})
    assert lane_settings(plain, 0) is plain and plain.server.peer_port == 9077


@pytest.mark.parametrize("bad", [0, -1, 10_000])
def test_a_bad_lane_count_is_refused(bad: int) -> None:
    with pytest.raises(Exception, match="lanes"):
        load_settings({"lanes": bad}, env={})


def test_the_layout_check() -> None:
    check_layout("", 1, 2, "x.db", fresh=True)  # a new database takes its place
    check_layout("", 0, 1, "x.db", fresh=False)  # a node's from before lanes
    check_layout("0/1/1", 0, 1, "x.db", fresh=False)  # one lane: no partition to differ
    with pytest.raises(ClusterMismatch, match=r"is lane 1 of 2 \(partition 1\)"):
        check_layout("1/2/1", 1, 2, "x.db", fresh=False)  # memories moved in partition 2
    check_layout(layout_value(1, 2), 1, 2, "x.db", fresh=False)
    with pytest.raises(ClusterMismatch, match="lane 0 of 1"):
        check_layout("", 0, 2, "x.db", fresh=False)
    with pytest.raises(ClusterMismatch, match=r"is lane 1 of 2 .* lane 1 of 4"):
        check_layout(layout_value(1, 2), 1, 4, "x.db", fresh=False)


def test_which_lanes_a_write_goes_to() -> None:
    for kind in GLOBAL_KINDS:
        assert list(lanes_of_item(kind, "proj:ws/p", 3)) == [0, 1, 2]
    assert lanes_of_item(NSUB_PUT, agent_key("a"), 4) == (0,)
    assert lanes_of_item(MSG_SEND, mailbox_key("w", "p"), 4) == (lane_of(mailbox_key("w", "p"), 4),)
    assert lane_of(mem_key("x"), 8) == lane_of_id("x", 8)  # a memory: where its id says
    items = [(NOTE_NEW, inbox_key(f"a{i}"), {}) for i in range(20)]
    items.append((SESSION_START, "proj:w/p", {}))
    items.append((APIKEY_PUT, "ident:dir", {}))
    shares = split_items(items, 2)
    assert sorted(shares) == [0, 1]
    for lane, idx in shares.items():
        assert 20 in idx and 21 in idx  # what every lane keeps is in every share
        assert all(lane_of(items[i][1], 2) == lane for i in idx if i < 20)


def test_ids_name_their_lane() -> None:
    key = mailbox_key("ws", "project-7")
    for lanes in (2, 3, 8):
        for _ in range(50):
            found = record_id("note", "zed", None, key=key, lanes=lanes)
            assert lane_of_id(found, lanes) == lane_of(key, lanes)
        # with an Idempotency-Key: the same id every time
        keyed = {record_id("note", "zed", "k-1", key=key, lanes=lanes) for _ in range(3)}
        assert len(keyed) == 1 and id_fits(keyed.pop(), key, lanes)
    # one lane: ids as they always were
    assert record_id("note", "zed", "k-1") == str(uuid.uuid5(
        uuid.UUID("6f1c2b7e-9a4d-5c3e-8b21-4d0e7a9f3c55"), "note:zed:k-1"))
    assert mint(key, 1, lambda n: f"id-{n}") == "id-0"


def test_every_route_has_a_lane_rule() -> None:
    app = web.Application()
    app[NODE] = SimpleNamespace(settings=load_settings({}, env={}))
    for module in ROUTE_MODULES:
        module.add_routes(app)
    served = {(r.method, r.resource.canonical) for r in app.router.routes()
              if r.resource is not None and r.method != "HEAD"}
    assert served - set(rules.table()) == set()
    assert set(rules.table()) - served <= {("POST", "/lane/v1/{name}")}
