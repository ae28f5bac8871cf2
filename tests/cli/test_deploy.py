"""deploy/: the example config loads as node settings, and the unit matches `cluster init`."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
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


def test_unit_is_type_notify_with_a_watchdog_and_part_of_the_target() -> None:
    parsed = unit()
    service = parsed["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert service["WatchdogSec"] == "30s"
    assert "AF_UNIX" in service["RestrictAddressFamilies"].split()  # the NOTIFY_SOCKET
    for key in ("ProtectHome", "PrivateTmp", "NoNewPrivileges"):
        assert service[key] == "yes"
    assert parsed["Unit"]["PartOf"] == "ai-memory.target"
    assert parsed["Install"]["WantedBy"] == "ai-memory.target"
    target = configparser.ConfigParser(strict=False, interpolation=None)
    target.read(DEPLOY / "ai-memory.target")
    assert target["Install"]["WantedBy"] == "multi-user.target"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze missing and `make deps` could not install it (needs apt-get as root)",
)
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    # The real ExecStart path (/opt/ai-memory/...) does not exist here: point it at this
    # checkout's own ai-memory so that verify checks everything, the binary included.
    exe = Path(sys.executable).with_name("ai-memory")
    assert exe.exists(), exe
    text = (DEPLOY / "ai-memory@.service").read_text()
    assert "/opt/ai-memory/.venv/bin/ai-memory" in text
    instance = tmp_path / "ai-memory@node1.service"
    instance.write_text(text.replace("/opt/ai-memory/.venv/bin/ai-memory", str(exe)))
    shutil.copy(DEPLOY / "ai-memory.target", tmp_path / "ai-memory.target")
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(instance), str(tmp_path / "ai-memory.target")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr
