"""A node's simulated disk: the reference replica plus its promises.

:class:`store.in_memory.Replica` is the "disk": it survives a crash while the
core is rebuilt from it, exactly as ``daemon/node.py`` rebuilds a core from
``Store.load_core_state()``. A write is durable once the driver's store
call completes (at once, or after a slow disk's delay: ``tests/sim/node.py``).

It keeps the production store's contract for garbage collection and
mailbox rebuilds: ``Collect`` drops every logged op the floor covers, mailbox
ops included, and an owner rebuilds a mailbox from the merged state
(:meth:`store.in_memory.Replica.mailbox_state_ops`, the same synthesis as
``store.db.Store.mailbox_state_ops``, held equal by
``tests/store/test_equivalence.py``), never from the op log.
"""

from __future__ import annotations

import copy

from store.in_memory import Replica


class SimDisk(Replica):
    """The replica as the simulator's :class:`federation.driver.Store`."""

    def seed_copy(self) -> SimDisk:
        out = super().seed_copy()
        assert isinstance(out, SimDisk)
        return out

    def backup(self) -> SimDisk:
        """``ai-memory backup`` of this member's own database: everything,
        its promises included (a restore marks it to recover)."""
        return copy.deepcopy(self)
