"""One lane process: ``python -m cli.lane_child``, started by :mod:`daemon.lanes.supervisor`.

It serves with the supervisor's flags (``AI_MEMORY_LANE_FLAGS``) as lane
``AI_MEMORY_LANE_INDEX``, exactly as ``ai-memory serve`` would."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys

from cli.serve import start

FLAGS_ENV = "AI_MEMORY_LANE_FLAGS"  # daemon.lanes.supervisor.FLAGS_ENV
PARENT_ENV = "AI_MEMORY_LANE_SUPERVISOR"  # daemon.lanes.supervisor.PARENT_ENV
PR_SET_PDEATHSIG = 1


def die_with_supervisor() -> None:
    """Ask Linux to SIGTERM this lane when its supervisor dies (kill -9, the
    OOM killer): a lane left behind would keep the node's ports, and the
    node, restarted, could not start its own lanes."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):  # it died before the request took effect
        sys.exit(1)


if __name__ == "__main__":
    die_with_supervisor()
    start(json.loads(os.environ.get(FLAGS_ENV) or "{}"))
