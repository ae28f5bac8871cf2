"""Fixtures for CLI tests: a stub daemon, a CliRunner bound to it, a clean environment."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import cli
from tests.cli.stub import StubDaemon

CLI_ENV_VARS = (
    "AI_MEMORY_URL",
    "AI_MEMORY_AGENT_ID",
    "AI_MEMORY_API_KEY",
    "AI_MEMORY_KEY",
    "AI_MEMORY_NODE_ID",
    "AI_MEMORY_ROOT_KEY",
    "AI_MEMORY_WORKSPACE",
    "AI_MEMORY_PROJECT",
    "AI_MEMORY_CLUSTER_SECRET",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ambient AI_MEMORY_* variables, and a cwd with no .ai-memory.toml above it."""
    for name in CLI_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def stub() -> Iterator[StubDaemon]:
    daemon = StubDaemon().start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def run(stub: StubDaemon) -> Callable[..., Result]:
    """Invoke ``ai-memory --url STUB ARGS...``; keyword ``input`` feeds stdin."""

    def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(cli, ["--url", stub.url, *args], input=input, env=env)

    return invoke
