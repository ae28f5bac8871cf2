"""Which lanes the items of one write go to (pure)."""

from __future__ import annotations

from typing import Any

from common.lanes import lanes_of_item


def split_items(items: list[tuple[str, str, dict[str, Any]]],
                lanes: int) -> dict[int, list[int]]:
    """The indexes of ``items`` by the lane each goes to; an item every lane
    keeps is in every lane's share."""
    shares: dict[int, list[int]] = {}
    for i, (kind, key, _) in enumerate(items):
        for lane in lanes_of_item(kind, key, lanes):
            shares.setdefault(lane, []).append(i)
    return shares
