"""The peer secret of a `cluster up` cluster, kept in its data directory.

``cluster up`` without ``--secret`` (or ``AI_MEMORY_CLUSTER_SECRET``) uses
``DATA/cluster.secret``: made once (256 random bits, hex, mode 0600, created
exclusively so two starts never write two secrets) and read again on every
later ``cluster up`` with the same data directory, so the cluster keeps one
secret across restarts. The children get it in ``AI_MEMORY_CLUSTER_SECRET``,
as a node started by hand would. ``DATA/cluster.json`` names the file while
the cluster runs (``secret_file``), and the CLI commands that sign requests
like a peer (``backup``) read it from there when no secret is given and
their ``--url`` is one of that cluster's nodes.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from cli.node_config import new_secret
from common.errors import BadRequest

SECRET_FILE = "cluster.secret"


def secret_path(data_dir: Path) -> Path:
    return data_dir / SECRET_FILE


def load_or_create(data_dir: Path) -> str:
    """The secret in ``DATA/cluster.secret``, made now if there is none."""
    path = secret_path(data_dir)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read(path)
    secret = new_secret()
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")
    return secret


def read(path: Path) -> str:
    """The secret in ``path``, after making sure only its owner can read it."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        os.chmod(path, 0o600)  # a copy made with a loose umask: tighten it, do not refuse
    secret = path.read_text().strip()
    if not secret:
        raise BadRequest(f"{path} is empty",
                         hint="delete it to have a new secret made, or write one into it")
    return secret


def for_url(url: str, data_dir: Path) -> str | None:
    """The secret of the `cluster up` in ``data_dir`` if ``url`` is one of its nodes."""
    try:
        state = json.loads((data_dir / "cluster.json").read_text())
        nodes = state["nodes"].values()
        secret_file = state.get("secret_file")
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    wanted = url.rstrip("/")
    if not secret_file or not any(str(n.get("url", "")).rstrip("/") == wanted for n in nodes):
        return None
    try:
        return read(Path(secret_file))
    except (OSError, BadRequest):
        return None
