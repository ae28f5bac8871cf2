"""A node's simulated disk: the reference replica plus its promises.

:class:`store.merge.Replica` is the "disk": it survives a crash while the
core is rebuilt from it, exactly as ``daemon/node.py`` rebuilds a core from
``Store.load_core_state()``. Everything written here is durable the moment
the call returns (the simulator executes effects synchronously, in order).

Garbage collection keeps mailbox ops, as ``federation.effects.Collect``
requires: mailbox ownership reloads a mailbox from the op log, and dropping
an acknowledged claim while its message's send survives would let a later
owner offer the message again.
"""

from __future__ import annotations

from store.merge import Replica
from store.ops import MAILBOX_KINDS


class SimDisk(Replica):
    def gc(self, floor_vv: dict[str, int]) -> int:
        log = self._log  # the reference replica's op log, keyed by op id
        doomed = [oid for oid, op in log.items()
                  if oid[1] <= floor_vv.get(oid[0], 0) and op.kind not in MAILBOX_KINDS]
        for oid in doomed:
            del log[oid]
        return len(doomed)
