from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """Three real nodes; ``@LANES`` (tests.cluster.harness) runs a test with
    one and with two lanes per node."""
    c = Cluster(tmp_path, lanes=getattr(request, "param", 1))
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()
