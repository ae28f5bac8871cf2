"""``ai-memory backup`` and ``ai-memory restore``.

``backup --url NODE --out FILE`` asks the node for a consistent online copy
of its database (``POST /api/v1/admin/backup``, signed with the cluster
secret when one is given or when NODE belongs to the `cluster up` running in
``--data``, see :mod:`cli.local_secret`) and writes it to FILE, plus ``FILE.json``: the
node id, incarnation and version vector the copy holds, its schema version,
op count, size and the time the node took. The file is written beside FILE
first and renamed, so FILE is either complete or absent.

``restore FILE --db PATH`` writes the backup as the database of a stopped
node under a NEW incarnation id (see :mod:`store.backup`); the node then
catches up from its peers when it starts.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click

from cli.local_secret import for_url
from cli.output import note, print_json
from cli.state import CliState, pass_state
from common import limits, trust
from common.errors import Unauthorized, from_reply

SECRET_ENV = "AI_MEMORY_CLUSTER_SECRET"
OPERATOR_ID = "ai-memory-operator"
UNAUTHORIZED_HINT = (
    f"pass the cluster's secret with --secret or set {SECRET_ENV} (a `cluster up` cluster "
    "keeps it in DATA/cluster.secret, found by itself with --data DATA when --url is one of its "
    "nodes), or a root key with --api-key")


def fetch_backup(url: str, out: Path, secret: str | None,
                 timeout: float = limits.backup_http_timeout_secs,
                 key: str | None = None) -> dict[str, Any]:
    from cli.client import CannotConnect
    from daemon.peer.auth import BOOT_HEADER, sign

    path = "/api/v1/admin/backup"
    started = time.monotonic()
    tmp = out.with_name(out.name + ".part")
    secret = None if key else secret  # a (root) key stands instead of the signature
    to, boot = (_node_id(url, timeout) if secret else ""), ""
    for attempt in (1, 2):
        headers = {"Content-Type": "application/octet-stream"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        elif secret:
            # Signed like a peer request: for this node and the boot id it
            # announces (learned from its first 401, as peers learn it).
            headers.update(sign(secret, OPERATOR_ID, to, "POST", path, b"", time.time(), boot))
        req = urllib.request.Request(url.rstrip("/") + path, data=b"", method="POST",
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=_tls(url)) as resp:
                meta = json.loads(resp.headers["X-AIM-Backup"])
                with open(tmp, "wb") as fh:
                    while chunk := resp.read(limits.backup_chunk_bytes):
                        fh.write(chunk)
            break
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            announced = exc.headers.get(BOOT_HEADER)
            if exc.code == 401 and announced and announced != boot and attempt == 1:
                boot = announced
                continue
            error = from_reply(exc.code, raw, exc.headers.get("Retry-After"))
            if isinstance(error, Unauthorized):
                error.details["hint"] = UNAUTHORIZED_HINT
            raise error from None
        except urllib.error.URLError as exc:
            unverified = trust.explain(exc, url)
            if unverified:
                raise CannotConnect(unverified, hint=trust.HINT) from None
            raise CannotConnect(f"cannot connect to {url}: {exc.reason}") from None
    if tmp.stat().st_size != meta["bytes"]:
        tmp.unlink()
        raise CannotConnect(f"backup truncated: got {tmp.stat().st_size} of {meta['bytes']} bytes")
    os.replace(tmp, out)
    meta["file"] = str(out)
    meta["total_seconds"] = round(time.monotonic() - started, 3)
    Path(f"{out}.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta  # type: ignore[no-any-return]


def _health(url: str, timeout: float) -> dict[str, Any]:
    """The node's /health ({} when it does not answer one: the backup says why)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/api/v1/health", timeout=timeout,
                                    context=_tls(url)) as resp:
            found = json.loads(resp.read())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def backup_node(url: str, out: Path, secret: str | None,
                timeout: float = limits.backup_http_timeout_secs,
                key: str | None = None) -> dict[str, Any]:
    """:func:`fetch_backup` of the node at ``url``; of a node with lanes, of
    each lane on its own port: lane 0 to ``out``, lane i to
    ``<stem>.lane<i><suffix>`` beside it (the names its databases have), and
    ``out.json`` says so (``lanes``, ``lane_files``)."""
    from daemon.lanes.layout import lane_db_path, lane_url

    health = _health(url, timeout)
    lanes = int(health.get("lanes", 1))
    if lanes == 1:
        return fetch_backup(url, out, secret, timeout, key=key)
    offset = int(health["lane_port_offset"])
    metas = [fetch_backup(lane_url(url, i, offset), Path(lane_db_path(str(out), i)), secret,
                          timeout, key=key) for i in range(lanes)]
    meta = {**metas[0], "lanes": lanes, "lane_files": [m["file"] for m in metas],
            "lane_backups": metas,
            "total_seconds": round(sum(m["total_seconds"] for m in metas), 3)}
    Path(f"{out}.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _tls(url: str) -> ssl.SSLContext | None:
    return trust.context() if url.startswith("https:") else None


def _node_id(url: str, timeout: float) -> str:
    """The node id a node reports on /health (what a signature is made for)."""
    from cli.client import CannotConnect

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/api/v1/health", timeout=timeout,
                                    context=_tls(url)) as resp:
            return str(json.loads(resp.read())["node_id"])
    except (urllib.error.URLError, KeyError, ValueError) as exc:
        raise CannotConnect(f"cannot read the node id of {url}: {exc}") from None


@click.command("backup")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the database copy (and OUT.json beside it).")
@click.option("--secret", envvar=SECRET_ENV, show_envvar=True,
              help="The cluster secret, when the node has one: signs the request.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".data"), show_default=True,
              help="Data directory of a local `cluster up`: without --secret, its "
                   "cluster.secret signs a backup of one of its nodes.")
@click.option("--json", "as_json", is_flag=True, help="Print the backup's description as JSON.")
@pass_state
def backup(state: CliState, out: Path, secret: str | None, data_dir: Path,
           as_json: bool) -> None:
    """Take a consistent online backup of the node at --url.

    Signed with the cluster secret (--secret, AI_MEMORY_CLUSTER_SECRET, or
    that of the `cluster up` running in --data when --url is one of its
    nodes), or, given a root key (--api-key), sent with that key instead
    (what a keys-mode node without a secret needs)."""
    key = getattr(state, "key", None) or state.api_key
    if not secret and not key:
        secret = for_url(state.url, data_dir)
    meta = backup_node(state.url, out, secret, key=key)
    if as_json:
        print_json(meta)
        return
    ops = sum(meta["version_vector"].values())
    click.echo(f"{out}: {meta['bytes']} bytes from {meta['node_id']} (incarnation "
               f"{meta['incarnation']}), {ops} ops in its version vector, "
               f"{meta['seconds']:.2f}s on the node")
    if meta.get("lanes", 1) > 1:
        note(f"{meta['lanes']} lanes, one file each: {', '.join(meta['lane_files'])}")
    note(f"description in {out}.json")


def _backup_lanes(file: Path) -> int:
    """The lane count of the node a backup file was taken from (its database
    records it; a file of a lane other than 0 is refused: restore lane 0's)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{file}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM store_meta WHERE name = 'lane_layout'").fetchone()
    except sqlite3.Error:
        row = None
    finally:
        conn.close()
    if row is None or not row[0]:
        return 1
    lane, lanes, _ = (int(x) for x in str(row[0]).split("/"))
    if lane != 0:
        raise click.ClickException(f"{file} is lane {lane}'s backup; restore the backup of "
                                   "lane 0, which brings every lane's file beside it")
    return lanes


@click.command("restore")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The database path of the (stopped) node to restore.")
@click.option("--force", is_flag=True, help="Replace an existing database at --db.")
@click.option("--lanes", type=int, default=1, envvar="AI_MEMORY_LANES", show_envvar=True,
              show_default=True, help="The node's lane count (serve --lanes): a backup of "
                                      "another lane count is refused.")
def restore(file: Path, db: Path, force: bool, lanes: int) -> None:
    """Write a backup as a node's database, under a new incarnation (a node
    with lanes: every lane's file, each as that lane's database)."""
    from daemon.lanes.layout import lane_db_path
    from store.backup import restore as do_restore

    held = _backup_lanes(file)
    if held != lanes:
        raise click.ClickException(
            f"{file} is a backup of a node with {held} lane(s); this node runs {lanes} "
            "(--lanes, AI_MEMORY_LANES): a node's lane count is fixed, restore it on a node "
            "with the same count")
    for i in range(1, lanes):
        do_restore(lane_db_path(str(file), i), lane_db_path(str(db), i), force=force)
    result = do_restore(file, db, force=force)
    click.echo(f"{result['db']}: restored {result['ops']} ops in its version vector as "
               f"incarnation {result['incarnation']} (was {result['restored_from']})")
    note("start the node: it catches up from its peers before long")
