"""`cluster init --tls/--no-tls` and `tls rotate` as commands (in process)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from cli.main import cli
from common.certs import load_certs, member_id
from daemon.settings import load_settings


def _init(out: Path, *extra: str) -> dict[str, Any]:
    args = ["cluster", "init", "--nodes", "2", "--out", str(out), *extra]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return tomllib.loads((out / "node1.toml").read_text())


def test_init_turns_tls_on_off_loopback_and_on_demand(tmp_path: Path) -> None:
    remote = _init(tmp_path / "a", "--host", "10.0.0.1", "--host", "10.0.0.2")
    assert remote["cluster"]["peers"] == ["node2=https://10.0.0.2:9078"]
    assert remote["tls"] == {"cert": "node1.crt", "key": "node1.key", "ca": ["ca.crt"]}
    assert member_id(load_certs(tmp_path / "a" / "node2.crt")[0]) == "node2"
    assert "tls" not in _init(tmp_path / "b")  # loopback: plain HTTP by default
    assert _init(tmp_path / "c", "--tls")["cluster"]["peers"] == ["node2=https://127.0.0.1:9078"]
    off = _init(tmp_path / "d", "--host", "10.0.0.1", "--host", "10.0.0.2", "--no-tls")
    assert "tls" not in off and not (tmp_path / "d" / "ca.crt").exists()
    settings = load_settings(config_path=tmp_path / "a" / "node1.toml", env={})
    assert settings.tls.cert == str((tmp_path / "a" / "node1.crt").resolve())
    assert settings.tls.ca == (str((tmp_path / "a" / "ca.crt").resolve()),)


def test_tls_rotate_commands(tmp_path: Path) -> None:
    _init(tmp_path, "--tls")
    run = CliRunner().invoke(cli, ["tls", "rotate", "--dir", str(tmp_path), "--node", "node2"])
    assert run.exit_code == 0, run.output
    assert "node2.crt  node2  serial" in run.output and "node1.crt" not in run.output
    run = CliRunner().invoke(cli, ["tls", "rotate", "--dir", str(tmp_path), "--new-ca"])
    assert run.exit_code == 0 and "bundle" in run.output
    assert len(load_certs(tmp_path / "ca.crt")) == 2
    both = CliRunner().invoke(cli, ["tls", "rotate", "--dir", str(tmp_path), "--drop-old-ca",
                                    "--new-ca"])
    assert both.exit_code == 2
    run = CliRunner().invoke(cli, ["tls", "rotate", "--dir", str(tmp_path), "--drop-old-ca"])
    assert run.exit_code == 0 and len(load_certs(tmp_path / "ca.crt")) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = CliRunner().invoke(cli, ["tls", "rotate", "--dir", str(empty)])
    assert missing.exit_code == 3 and "ca.key" in missing.output


def test_the_systemd_drop_in_hands_over_the_files_the_config_names(tmp_path: Path) -> None:
    import configparser

    deploy = Path(__file__).resolve().parents[2] / "deploy"
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    text = (deploy / "ai-memory@.service.d" / "tls.conf").read_text()
    creds = [line.split("=", 1)[1] for line in text.splitlines()
             if line.startswith("LoadCredential=")]
    ids = {c.split(":", 1)[0].replace("%i", "node1") for c in creds}
    conf = _init(tmp_path, "--tls")["tls"]
    assert ids == {conf["cert"], conf["key"], *conf["ca"]}  # names inside %d, the config's dir
    for cred in creds:
        cid, source = cred.split(":", 1)
        assert source == "/etc/ai-memory/" + cid  # installed beside /etc/ai-memory/%i.toml
    unit = (deploy / "ai-memory@.service").read_text()
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
