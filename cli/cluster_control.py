"""The control channel of a running ``ai-memory cluster up``.

The supervisor writes ``DATA/cluster.json`` (its pid, the path of its
control socket, and every node's pid, url and state) whenever a node starts
or exits, and removes it when it stops. ``ai-memory cluster stop|start|kill
NODE`` reads that file, connects to the Unix socket it names, sends one JSON
line (``{"cmd": "stop", "node": "node2"}``) and prints the one JSON line it
gets back (``cluster start`` waits for the node's health check first).
Only the supervisor starts and stops nodes, so its restart logic
always knows which exits were asked for.

The socket lives in the data directory when the path fits a Unix socket
address (``sun_path`` is 108 bytes on Linux), otherwise in the temporary
directory under a name derived from the data directory.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from common import limits
from common.errors import BadRequest, NotFound, Unavailable

STATE_FILE = "cluster.json"
SOCKET_FILE = "control.sock"
SUN_PATH_MAX = 100  # a little under Linux's 108 so the terminating NUL always fits
COMMANDS = ("stop", "start", "kill")


def state_path(data_dir: Path) -> Path:
    return data_dir / STATE_FILE


def socket_path(data_dir: Path) -> Path:
    here = data_dir.resolve() / SOCKET_FILE
    if len(os.fsencode(here)) <= SUN_PATH_MAX:
        return here
    digest = hashlib.sha256(os.fsencode(data_dir.resolve())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"ai-memory-{digest}.sock"


def write_state(data_dir: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically (a reader never sees half of it)."""
    path = state_path(data_dir)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, path)


def read_state(data_dir: Path) -> dict[str, Any]:
    try:
        state = json.loads(state_path(data_dir).read_text())
    except FileNotFoundError:
        raise NotFound(f"no running `cluster up` found in {data_dir} (no {STATE_FILE})") from None
    except ValueError as exc:
        raise Unavailable(f"unreadable {state_path(data_dir)}: {exc}") from None
    if not isinstance(state, dict):
        raise Unavailable(f"unreadable {state_path(data_dir)}: not an object")
    return state


async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    handle: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]) -> None:
    """Read one JSON request line, answer it with ``handle``'s reply, close."""
    try:
        try:
            line = await reader.readline()
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("not an object")
            reply = await handle(req)
        except (ValueError, asyncio.LimitOverrunError) as exc:
            reply = {"error": f"bad control request: {exc}"}
        writer.write(json.dumps(reply).encode() + b"\n")
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def request(data_dir: Path, cmd: str, node: str,
            timeout: float = limits.cluster_control_timeout_secs,
            **extra: Any) -> dict[str, Any]:
    """Send one command to the supervisor of ``data_dir``; its answer."""
    if cmd not in COMMANDS:
        raise BadRequest(f"unknown cluster command {cmd!r}")
    state = read_state(data_dir)
    if node not in state.get("nodes", {}):
        known = ", ".join(sorted(state.get("nodes", {}))) or "none"
        raise NotFound(f"no node {node!r} in this cluster (nodes: {known})")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(str(state["control"]))
        except OSError as exc:
            raise Unavailable(f"the `cluster up` supervisor does not answer: {exc}") from None
        sock.sendall(json.dumps({"cmd": cmd, "node": node, **extra}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        raise Unavailable(f"no answer from the supervisor within {timeout:g}s") from None
    finally:
        sock.close()
    try:
        reply = json.loads(data)
    except ValueError:
        raise Unavailable("the supervisor closed the control connection without an answer") from None
    if not isinstance(reply, dict):
        raise Unavailable("malformed answer from the supervisor")
    if "error" in reply:
        if reply.get("code") == "unavailable":
            raise Unavailable(str(reply["error"]))
        raise BadRequest(str(reply["error"]))
    return reply
