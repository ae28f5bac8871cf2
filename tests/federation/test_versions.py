from __future__ import annotations

from federation.versions import VersionVector, vv_floor, vv_lag


def test_watermark_advances_when_gaps_fill() -> None:
    v = VersionVector({"a": 2})
    assert ("a", 2) in v and ("a", 3) not in v
    assert v.add("a", 4) and v.mark("a") == 2 and ("a", 4) in v
    assert v.held_count() == 1
    assert not v.add("a", 4) and not v.add("a", 1)
    assert v.add("a", 3) and v.mark("a") == 4 and v.held_count() == 0
    assert v.to_dict() == {"a": 4}


def test_lacks_from_compares_watermarks_only() -> None:
    v = VersionVector({"a": 3})
    v.add("b", 5)  # held past a gap: not advertised
    assert v.to_dict() == {"a": 3}
    assert v.lacks_from({"a": 2})
    assert not v.lacks_from({"a": 3, "b": 9})


def test_floor_and_lag() -> None:
    assert vv_floor([{"a": 3, "b": 2}, {"a": 1, "b": 5, "c": 1}]) == {"a": 1, "b": 2}
    assert vv_floor([]) == {}
    assert vv_floor([{"a": 0}]) == {}
    assert vv_lag({"a": 5, "b": 1}, {"a": 2, "b": 4}) == 3
