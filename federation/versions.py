"""What ops this node holds, as a version vector plus out-of-order seqs.

Each origin numbers its ops 1, 2, 3, ... without gaps, so "everything from
origin ``o`` up to ``n``" is one int: the *watermark*. Ops that arrive past
a gap (a lost or reordered message) are remembered individually until the
gap fills. The vector this node advertises is the watermarks alone, so a
peer never skips an op this node is missing.

The core uses this to decide which received ops are new (and need a
``Persist``) and to answer "do they lack anything we hold?". After a restart
only the watermarks are known (the store's version vector); ops that were
held past a gap look new again, which costs one idempotent re-apply.
"""

from __future__ import annotations

from collections.abc import Mapping


class VersionVector:
    __slots__ = ("_held", "_marks")

    def __init__(self, marks: Mapping[str, int] | None = None) -> None:
        self._marks: dict[str, int] = {o: int(s) for o, s in (marks or {}).items() if s > 0}
        self._held: dict[str, set[int]] = {}

    def __contains__(self, op_id: tuple[str, int]) -> bool:
        origin, seq = op_id
        return seq <= self._marks.get(origin, 0) or seq in self._held.get(origin, ())

    def add(self, origin: str, seq: int) -> bool:
        """Record an op id; False if it was already held."""
        if (origin, seq) in self:
            return False
        mark = self._marks.get(origin, 0)
        if seq == mark + 1:
            held = self._held.get(origin)
            mark = seq
            while held and mark + 1 in held:
                mark += 1
                held.discard(mark)
            if held is not None and not held:
                del self._held[origin]
            self._marks[origin] = mark
        else:
            self._held.setdefault(origin, set()).add(seq)
        return True

    def mark(self, origin: str) -> int:
        return self._marks.get(origin, 0)

    def held(self, origin: str) -> list[int]:
        """Seqs of ``origin`` held beyond its watermark (after a gap)."""
        return sorted(self._held.get(origin, ()))

    def max_seq(self, origin: str) -> int:
        """The greatest seq held of ``origin``, gap or not."""
        held = self._held.get(origin)
        mark = self._marks.get(origin, 0)
        return max(mark, max(held)) if held else mark

    def covers(self, other: Mapping[str, int]) -> bool:
        """True if this vector holds every op ``other`` covers."""
        return all(self._marks.get(o, 0) >= s for o, s in other.items())

    def to_dict(self) -> dict[str, int]:
        return dict(self._marks)

    def origins(self) -> set[str]:
        """Every origin of which an op is held."""
        return set(self._marks) | set(self._held)

    def held_count(self) -> int:
        return sum(len(s) for s in self._held.values())

    def lacks_from(self, other: Mapping[str, int]) -> bool:
        """True if some op this vector covers is not covered by ``other``."""
        return any(m > other.get(o, 0) for o, m in self._marks.items())


def vv_floor(vectors: list[Mapping[str, int]]) -> dict[str, int]:
    """The greatest vector covered by every one of ``vectors``."""
    if not vectors:
        return {}
    origins = set(vectors[0])
    for v in vectors[1:]:
        origins &= set(v)
    out = {o: min(v[o] for v in vectors) for o in origins}
    return {o: s for o, s in out.items() if s > 0}


def vv_lag(ours: Mapping[str, int], theirs: Mapping[str, int]) -> int:
    """How many ops ``ours`` covers that ``theirs`` does not."""
    return sum(max(0, m - theirs.get(o, 0)) for o, m in ours.items())
