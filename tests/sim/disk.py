"""A node's simulated disk: the reference replica plus its promises.

:class:`store.merge.Replica` is the "disk": it survives a crash while the
core is rebuilt from it, exactly as ``daemon/node.py`` rebuilds a core from
``Store.load_core_state()``. Everything written here is durable the moment
the call returns (the simulator executes effects synchronously, in order).

It keeps the production store's contract for garbage collection and
mailbox rebuilds: ``Collect`` drops every logged op the floor covers, mailbox
ops included, and an owner rebuilds a mailbox from the merged state
(:meth:`store.merge.Replica.mailbox_state_ops`, the same synthesis as
``store.db.Store.mailbox_state_ops``, held equal by
``tests/store/test_equivalence.py``), never from the op log.
"""

from __future__ import annotations

from common import limits
from common.ops import Op
from store.merge import Replica


class SimDisk(Replica):
    def seed_copy(self) -> SimDisk:
        out = super().seed_copy()
        assert isinstance(out, SimDisk)
        return out

    def load_mailbox(self, mailbox: str) -> list[Op]:
        ws, _, proj = mailbox.removeprefix("mbox:").partition("/")
        return self.mailbox_state_ops(ws, proj, history_max=limits.mailbox_history_load_max)
