"""TOML configuration files for the nodes of a new cluster (``cluster init``).

Each file is what ``ai-memory serve --config FILE`` reads (the sections of
``daemon/settings.py``): ``[server]`` host and port, ``[store]`` db,
``[cluster]`` node id, cluster id, peers as ``id=url`` entries, write quorum
and the shared secret that signs peer requests, and with TLS a ``[tls]``
section naming the member's certificate, key and the cluster CA by paths
relative to the config (the files :mod:`cli.pki` writes beside it). The
secret is generated once per cluster with :func:`secrets.token_hex`, so the
files are written readable by their owner only.
"""

from __future__ import annotations

import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

from cli.layout import NodeSpec, majority, peer_entries
from common.errors import Conflict

SECRET_BYTES = 32


def is_loopback_host(host: str) -> bool:
    from daemon.settings import is_loopback_host as loopback

    return loopback(host)


def new_secret() -> str:
    return secrets.token_hex(SECRET_BYTES)


def _toml_str(value: str) -> str:
    # A JSON string is a valid TOML basic string for everything json.dumps emits.
    return json.dumps(value, ensure_ascii=False)


def new_cluster_id() -> str:
    """A cluster's id: every member stores it and refuses another cluster's data."""
    return "c-" + secrets.token_hex(8)


def render_config(spec: NodeSpec, cluster: list[NodeSpec], secret: str, now: datetime,
                  cluster_id: str = "", lanes: int = 1) -> str:
    peers = ", ".join(_toml_str(p) for p in peer_entries(spec, cluster))
    return "\n".join(
        [
            f"# ai-memory node {spec.node_id} of {len(cluster)}; written by `ai-memory cluster init`"
            f" at {now.strftime('%Y-%m-%dT%H:%M:%SZ')}.",
            "# Holds the cluster secret: keep it readable by root only (systemd hands it",
            "# to the service with LoadCredential=).",
            'log_level = "info"',
            "",
            "[server]",
            f"host = {_toml_str(spec.host)}",
            f"port = {spec.port}",
            "# Lane processes of this node (docs/lanes.md): the same on every member; lane i",
            "# also listens on port + 100 x (i + 1) for its peers.",
            f"lanes = {lanes}",
            "",
            "[store]",
            f"db = {_toml_str(str(spec.db))}",
            "",
            "[cluster]",
            f"node_id = {_toml_str(spec.node_id)}",
            *([f"cluster_id = {_toml_str(cluster_id)}"] if cluster_id else []),
            f"peers = [{peers}]",
            f"write_quorum = {majority(len(cluster))}",
            f"secret = {_toml_str(secret)}",
            "",
            "[auth]",
            "# keys: every request but GET /health needs a key (docs/security.md);",
            "# anonymous is refused on a non-loopback address without --insecure-anonymous.",
            f"mode = {_toml_str('anonymous' if is_loopback_host(spec.host) else 'keys')}",
            "",
            *(_tls_section(spec) if spec.tls else []),
        ]
    )


def _tls_section(spec: NodeSpec) -> list[str]:
    from cli.pki import CA_CERT, cert_file, key_file

    return [
        "[tls]",
        "# HTTPS for clients, mutual TLS with the peers. Relative paths are read from this",
        "# file's directory (systemd: the credentials directory, deploy/README.md).",
        f"cert = {_toml_str(cert_file(spec.node_id))}",
        f"key = {_toml_str(key_file(spec.node_id))}",
        f"ca = [{_toml_str(CA_CERT)}]  # the cluster CA; old and new during a CA rotation",
        "",
    ]


def write_configs(cluster: list[NodeSpec], out_dir: Path, *, force: bool = False,
                  lanes: int = 1) -> list[Path]:
    """Write ``{out_dir}/{node_id}.toml`` for every node with one fresh shared secret."""
    targets = [out_dir / f"{spec.node_id}.toml" for spec in cluster]
    existing = [str(t) for t in targets if t.exists()]
    if existing and not force:
        raise Conflict(f"refusing to overwrite {', '.join(existing)} (pass --force)")
    out_dir.mkdir(parents=True, exist_ok=True)
    secret = new_secret()
    cluster_id = new_cluster_id()
    now = datetime.now(UTC)
    for spec, target in zip(cluster, targets, strict=True):
        text = render_config(spec, cluster, secret, now, cluster_id, lanes)
        tmp = target.with_name(target.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    return targets
