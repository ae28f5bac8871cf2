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
