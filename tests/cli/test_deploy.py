"""deploy/: the example config loads as node settings, and the unit matches `cluster init`."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

from daemon.settings import load_settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "ai-memory@.service")
    return parser


def test_example_config_loads_as_node1() -> None:
    settings = load_settings(env={}, config_path=DEPLOY / "node1.example.toml")
    assert settings.cluster.node_id == "node1"
    assert [p.node_id for p in settings.cluster.peers] == ["node2", "node3"]
    assert settings.cluster.w == 2
    assert settings.store.db_path == "/var/lib/ai-memory/node1/ai-memory.db"


def test_unit_reads_the_instance_config_and_owns_the_database_directory() -> None:
    service = unit()["Service"]
    assert service["LoadCredential"] == "ai-memory.toml:/etc/ai-memory/%i.toml"
    assert service["ExecStart"] == (
        "/opt/ai-memory/.venv/bin/ai-memory serve --config %d/ai-memory.toml"
    )
    # `cluster init --data /var/lib/ai-memory` puts node N's db in the StateDirectory.
    assert service["StateDirectory"] == "ai-memory/%i"
    assert service["Restart"] == "on-failure"
    assert service["ProtectSystem"] == "strict"
    assert service["NoNewPrivileges"] == "yes"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_unit_passes_systemd_analyze_apart_from_the_missing_binary(tmp_path: Path) -> None:
    instance = tmp_path / "ai-memory@node1.service"
    shutil.copy(DEPLOY / "ai-memory@.service", instance)
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(instance)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    problems = [
        line
        for line in result.stderr.splitlines()
        if line.strip() and "/opt/ai-memory/.venv/bin/ai-memory is not executable" not in line
    ]
    assert problems == []
