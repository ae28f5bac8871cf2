"""The merges of the web inbox's fanned-out calls (daemon/lanes/table_web.py)."""

from __future__ import annotations

from typing import Any

from daemon.lanes.table_web import _merge_sent


def _lane(*orders: tuple[int, str]) -> dict[str, Any]:
    return {"page": 0, "page_size": 2, "box": "sent", "has_previous": False,
            "messages": [{"id": f"{h}{o}", "order": [h, o]} for h, o in orders]}


def test_the_sent_history_pages_the_lanes_merged_newest_first() -> None:
    lanes = [_lane((9, "n"), (5, "n"), (1, "n")), _lane((8, "n"), (7, "n"))]
    lanes[0]["page"] = lanes[1]["page"] = 0
    first = _merge_sent(None, lanes)  # type: ignore[arg-type]
    assert [m["id"] for m in first["messages"]] == ["9n", "8n"] and first["has_next"]
    assert all("order" not in m for m in first["messages"])
    for b in lanes:
        b["page"] = 2
    last = _merge_sent(None, lanes)  # type: ignore[arg-type]
    assert [m["id"] for m in last["messages"]] == ["1n"] and not last["has_next"]
