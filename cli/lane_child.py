"""One lane process: ``python -m cli.lane_child``, started by :mod:`daemon.lanes.supervisor`.

It serves with the supervisor's flags (``AI_MEMORY_LANE_FLAGS``) as lane
``AI_MEMORY_LANE_INDEX``, exactly as ``ai-memory serve`` would."""

from __future__ import annotations

import json
import os

from cli.serve import start

FLAGS_ENV = "AI_MEMORY_LANE_FLAGS"  # daemon.lanes.supervisor.FLAGS_ENV

if __name__ == "__main__":
    start(json.loads(os.environ.get(FLAGS_ENV) or "{}"))
