from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster

DEFAULT_LANES = int(os.environ.get("AI_MEMORY_TEST_LANES") or 1)


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """Three real nodes; ``@LANES`` (tests.cluster.harness) runs a test with
    one and with two lanes per node. ``AI_MEMORY_TEST_LANES=N`` runs every
    other test of this fixture with N lanes."""
    c = Cluster(tmp_path, lanes=getattr(request, "param", None) or DEFAULT_LANES)
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()
