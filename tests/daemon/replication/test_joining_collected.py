"""What a member's hello says it collected, as the probe reads it (a restored
copy's check, daemon/replication/joining.py set_aside_a_copy_too_old)."""

from __future__ import annotations

from typing import Any

import pytest

from common import limits
from daemon.replication.joining import _collected, hello_answer


def test_a_serving_answer_carries_the_floors_and_a_waiting_one_none() -> None:
    assert hello_answer("serving", "n1", "c", collected={"n1": 4})["collected"] == {"n1": 4}
    assert "collected" not in hello_answer("waiting", "n1", "c")


@pytest.mark.parametrize("raw", [
    None, [], "x", {"n1": "4"}, {"n1": -1}, {"n1": True}, {"n1": 1.5}, {1: 4},
    {f"n{i}": 1 for i in range(limits.hello_collected_origins_max + 1)},
])
def test_anything_but_a_map_of_origins_to_seqs_reads_as_unknown(raw: Any) -> None:
    assert _collected(raw) is None


def test_a_well_formed_map_is_read_as_is() -> None:
    assert _collected({"n1": 0, "n2": 10}) == {"n1": 0, "n2": 10}


async def test_the_answer_counts_a_gc_the_core_handed_over_and_the_writer_has_not_run() -> None:
    # Between the core's Collect and the writer's DELETE the log still holds
    # those ops, but they are gone for the asker (review, 2026-12-05).
    from types import SimpleNamespace

    from daemon.services.peer import collected

    class Store:
        async def collected_floor(self) -> dict[str, int]:
            return {"n1": 4, "n2": 7}

    node = SimpleNamespace(store=Store(), core=SimpleNamespace(collect_floor={"n1": 9, "n3": 2}))
    assert await collected(node) == {"n1": 9, "n2": 7, "n3": 2}  # type: ignore[arg-type]
