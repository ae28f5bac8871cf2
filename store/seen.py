"""Which op ids a replica has seen, as a version vector plus a hold set.

Each origin numbers its ops 1, 2, 3, ... without gaps. A replica keeps, per
origin, the *watermark*: the greatest ``n`` such that every seq ``1..n`` is
seen. Ops that arrive past a gap are *held*: remembered individually until
the gap fills, then absorbed into the watermark. The version vector a
replica advertises is the watermarks alone, so a peer never skips an op
the replica is missing.

This record outlives the op log: :meth:`store.in_memory.Replica.gc` drops old
ops, but their ids stay covered here, so a re-sent copy is still skipped.
Pure and synchronous; the SQLite store persists the same two pieces (a
``vv`` table and a ``vv_held`` table) and keeps one of these in memory.
"""

from __future__ import annotations

from collections.abc import Iterable


class SeenSet:
    __slots__ = ("held", "watermark")

    def __init__(self, watermark: dict[str, int] | None = None,
                 held: dict[str, set[int]] | None = None) -> None:
        self.watermark: dict[str, int] = dict(watermark or {})
        self.held: dict[str, set[int]] = {o: set(s) for o, s in (held or {}).items() if s}

    def __contains__(self, op_id: tuple[str, int]) -> bool:
        origin, seq = op_id
        return seq <= self.watermark.get(origin, 0) or seq in self.held.get(origin, ())

    def advanced(self, origin: str, seqs: Iterable[int]) -> tuple[int, set[int]]:
        """The (watermark, held) ``origin`` would have after adding ``seqs``;
        does not change this set."""
        mark = self.watermark.get(origin, 0)
        held = set(self.held.get(origin, ()))
        held.update(s for s in seqs if s > mark)
        while mark + 1 in held:
            mark += 1
            held.discard(mark)
        return mark, held

    def install(self, origin: str, mark: int, held: set[int]) -> None:
        """Adopt a state computed by :meth:`advanced`."""
        self.watermark[origin] = mark
        if held:
            self.held[origin] = held
        else:
            self.held.pop(origin, None)

    def add(self, origin: str, seq: int) -> None:
        self.install(origin, *self.advanced(origin, (seq,)))

    def version_vector(self) -> dict[str, int]:
        return {o: m for o, m in self.watermark.items() if m > 0}

    def max_seq(self, origin: str) -> int:
        held = self.held.get(origin)
        mark = self.watermark.get(origin, 0)
        return max(mark, max(held)) if held else mark

    def origins(self) -> set[str]:
        return set(self.watermark) | set(self.held)
