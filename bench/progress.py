"""Progress bars: one for the run's steps, one for the step in hand.

The outer bar counts steps (each measured phase is one); the inner bar
counts operations of the current load job, fed from the load pool's shared
counter a few times a second, or any other quantity a step waits on (ops a
restarted node has caught up). Bars go to stderr; ``enabled=False`` (tests,
``--no-progress``) keeps the same calls and prints nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm


class Progress:
    def __init__(self, total_steps: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self.outer = tqdm(total=total_steps, desc="bench", unit="step", position=0, disable=not enabled,
                          dynamic_ncols=True)

    def close(self) -> None:
        self.outer.close()

    def note(self, text: str) -> None:
        """A line above the bars (the bars redraw below it)."""
        if self.enabled:
            tqdm.write(text)

    @contextmanager
    def step(self, desc: str, total: float | None = None, unit: str = "op") -> Iterator[Callable[[int], None]]:
        """A step with an inner bar; yields ``update(absolute_count)``."""
        self.outer.set_postfix_str(desc, refresh=True)
        inner = tqdm(total=total, desc=desc, unit=unit, position=1, leave=False, disable=not self.enabled,
                     dynamic_ncols=True)

        def update(n: int) -> None:
            if n > inner.n:
                inner.update(n - inner.n)

        try:
            yield update
        finally:
            inner.close()
            self.outer.update(1)
