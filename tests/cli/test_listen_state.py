"""The listener's state file and its ordering of events (no daemon needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.listen_state import ListenState, Order
from common.errors import Conflict


def test_the_cursor_moves_only_over_a_finished_prefix() -> None:
    order = Order()
    a, b, c = order.arrive("c1"), order.arrive("c2"), order.arrive("c3")
    assert order.finish(b) is None  # a still runs
    assert order.finish(a) == "c2"  # a and b are done: the cursor passes both
    assert order.finish(c) == "c3"
    d, e = order.arrive(None), order.arrive("c5")
    assert order.finish(d) is None and order.finish(e) == "c5"


def test_state_survives_a_reopen_and_drops_repeats(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    st = ListenState.open(path)
    one = st.arrive("inbox:bob", "v1.a")
    two = st.arrive("inbox:bob", "v1.b")
    st.finish("inbox:bob", two, "notify:n2")  # out of order: cursor stays
    rid = st.new_claim_id("m1")
    st.close()
    data = json.loads(path.read_text())
    assert "inbox:bob" not in data["cursors"] and data["handled"] == ["notify:n2"]
    again = ListenState.open(path)
    assert again.was_handled("notify:n2") and not again.was_handled("notify:n1")
    assert again.claim_ids("m1") == [rid]
    assert again.listener_id == st.listener_id
    del one
    entry = again.arrive("inbox:bob", "v1.a")
    again.finish("inbox:bob", entry, "notify:n1", claimed="m1")
    assert again.cursor("inbox:bob") == "v1.a" and again.claim_ids("m1") == []
    again.close()


def test_a_second_listener_may_not_share_the_file(tmp_path: Path) -> None:
    first = ListenState.open(tmp_path / "s.json")
    with pytest.raises(Conflict):
        ListenState.open(tmp_path / "s.json")
    first.close()
    ListenState.open(tmp_path / "s.json").close()
