"""`cluster status` prints what docs/operations.md shows, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

from cli.cluster_status import MemberView, columns, rows
from cli.output import table

DOC = Path(__file__).parents[2] / "docs" / "operations.md"


def documented_table() -> str:
    text = DOC.read_text()
    section = text[text.index("## Looking at a cluster: `ai-memory cluster status`"):]
    block = re.search(r"```\n(NODE .*?)\n```", section, re.S)
    assert block is not None
    return "\n".join(line for line in block.group(1).splitlines() if line.startswith(("NODE", "node")))


def status(node_id: str, owned: dict[str, int]) -> dict[str, object]:
    return {"node_id": node_id, "version": "0.1.0", "vv": {"node1": 10, "node2": 8},
            "owned_mailboxes": owned, "quorum_healthy": True}


def test_the_table_is_the_documented_one() -> None:
    first = {**status("node1", {}), "peers": {
        "node2": {"last_contact_ms_ago": 200, "vv": {"node1": 10, "node2": 8},
                  "round_trip_ms": 0.42, "far": False},
        "node3": {"last_contact_ms_ago": 4100, "vv": {"node1": 10, "node2": 8}, "lag_ops": 0,
                  "round_trip_ms": 0.61, "far": False}}}
    views = [
        MemberView("node1", "http://127.0.0.1:9077", status=first),
        MemberView("node2", "http://127.0.0.1:9078",
                   status=status("node2", {"mbox:default/project-b": 1025})),
        MemberView("node3", "http://127.0.0.1:9079", error="cannot connect", reason="refused"),
    ]
    shown = rows(first, views)
    printed = table(shown, columns(shown))
    assert [line.rstrip() for line in printed.splitlines()] == [
        line.rstrip() for line in documented_table().splitlines()]


def test_owned_mailboxes_show_workspace_project_and_epoch_three_at_most() -> None:
    owned = {"mbox:default/a": 1024, "mbox:default/b": 1025, "mbox:w/c": 2048, "mbox:w/d": 3072}
    first = status("node1", owned)
    [row] = rows(first, [MemberView("node1", "http://x", status=first)])
    assert row["mailboxes"] == "default/a@1024, default/b@1025, w/c@2048 (+1)"


def test_a_node_with_lanes_shows_them_and_counts_each_lanes_lag() -> None:
    def laned(node_id: str, vvs: list[dict[str, int]], owned: list[dict[str, int]]) -> dict:
        lanes = [{"lane": i, "node_id": node_id, "vv": vv, "owned_mailboxes": o,
                  "quorum_healthy": True} for i, (vv, o) in enumerate(zip(vvs, owned, strict=True))]
        return {**lanes[0], "version": "0.1.0", "lanes": lanes}
    # lane 1 of node2 is two ops behind node1's lane 1; lane 0s agree
    first = laned("node1", [{"node1": 5}, {"node1": 9}], [{"mbox:w/a": 1}, {}])
    second = laned("node2", [{"node1": 5}, {"node1": 7}], [{}, {"mbox:w/b": 2}])
    shown = rows(first, [MemberView("node1", "http://a", status=first),
                         MemberView("node2", "http://b", status=second)])
    assert [(r["lanes"], r["position"], r["lag"]) for r in shown] == [(2, 14, 0), (2, 12, 2)]
    assert shown[1]["mailboxes"] == "w/b@2"
    assert ("lanes", "LANES") in columns(shown)
    assert "LANES" in table(shown, columns(shown)).splitlines()[0]


def test_rtt_is_the_queried_nodes_estimate_and_says_far() -> None:
    first = {**status("node1", {}), "peers": {
        "node2": {"round_trip_ms": 51.26, "far": True}, "node3": {"round_trip_ms": None}}}
    shown = rows(first, [MemberView("node1", "http://a", status=first),
                         MemberView("node2", "http://b", status=status("node2", {})),
                         MemberView("node3", "http://c", status=status("node3", {}))])
    assert [r["rtt"] for r in shown] == ["self", "51.3 ms far", "-"]


def laned_first(peer_views: list[dict[str, object]]) -> dict[str, object]:
    """node1's status with one lane per entry of ``peer_views`` (its view of node2)."""
    lanes = [{**status("node1", {}), "lane": i, "peers": {"node2": v}}
             for i, v in enumerate(peer_views)]
    return {**lanes[0], "lanes": lanes}


def test_with_lanes_contact_and_rtt_come_from_every_lanes_link_not_lane_0s() -> None:
    # lane 0 last heard node2 9 s ago and has no sample; lane 1 heard it just now
    first = laned_first([
        {"last_contact_ms_ago": 9000, "round_trip_ms": None, "vv": {"node1": 3}},
        {"last_contact_ms_ago": 150, "round_trip_ms": 0.37, "far": False, "vv": {"node1": 4}}])
    shown = rows(first, [MemberView("node1", "http://a", status=first),
                         MemberView("node2", "http://b", status=status("node2", {}))])
    assert (shown[1]["contact"], shown[1]["rtt"]) == ("0.1s ago", "0.4 ms")


def test_with_lanes_rtt_is_the_fastest_lanes_and_far_says_how_many_lanes_judge_it() -> None:
    def rtt(views: list[dict[str, object]]) -> str:
        first = laned_first(views)
        return str(rows(first, [MemberView("node1", "http://a", status=first),
                                MemberView("node2", "http://b", status=None)])[1]["rtt"])
    near, far = {"round_trip_ms": 0.5, "far": False}, {"round_trip_ms": 31.0, "far": True}
    assert rtt([near, {"round_trip_ms": 2.25, "far": False}]) == "0.5 ms"
    assert rtt([far, {"round_trip_ms": 45.0, "far": True}]) == "31.0 ms far"
    # one lane's link waited behind its own busy loop: the column says so, not "far"
    assert rtt([near, far]) == "0.5 ms far 1/2"
    assert rtt([{"round_trip_ms": None}, far]) == "31.0 ms far"


def test_with_lanes_an_unreachable_member_shows_every_lanes_position_and_lag() -> None:
    first = laned_first([{"vv": {"node1": 3, "node2": 2}, "lag_ops": 1},
                         {"vv": {"node1": 4}, "lag_ops": 5}])
    views = [MemberView("node1", "http://a", status=first),
             MemberView("node2", "http://b", error="cannot connect", reason="refused")]
    row = rows(first, views)[1]
    assert (row["position"], row["lag"]) == (9, 6)


def test_with_lanes_an_idle_lanes_empty_copy_counts_as_nothing_held() -> None:
    first = laned_first([{"vv": {"node1": 3, "node2": 2}, "lag_ops": 1},
                         {"vv": {}, "lag_ops": 0}])
    row = rows(first, [MemberView("node1", "http://a", status=first),
                       MemberView("node2", "http://b", error="timed out", reason="timeout")])[1]
    assert (row["position"], row["lag"]) == (5, 1)
