"""The rooms of ``daemon/`` and what each may import, checked on the source.

``docs/architecture.md`` draws the rooms and states the rules in two tables
("Rooms of daemon/" and "What cli/ may import"); :data:`ROOMS` and
:data:`CLI` below are the same tables, and the first tests check that the
doc and these tables say the same thing. The rest parse every module's
imports with :mod:`ast` and hold them to the tables:

* a room is a subpackage of ``daemon/`` (``daemon/peer/``) or one of the few
  modules at its top (``daemon/node.py``); it may import itself, ``common``
  and what its row names, nothing else first-party;
* imports under ``if TYPE_CHECKING:`` are not counted: they name a type for
  mypy and load nothing at run time;
* ``cli/`` imports ``common`` and itself; the modules listed in :data:`CLI`
  may also import the daemon and store modules named there, and, except
  ``cli/hooks.py``, only inside the function of the command that needs them;
* wall time (``time.time``, ``datetime.now``) is read only in the modules of
  :data:`WALL_CLOCK_READERS`; a running node reads it through its ``Clock``;
* pydantic models under ``daemon/api/`` are defined only in the modules of
  :data:`API_MODULES_WITH_MODELS`; every other shape lives in ``daemon/schemas/``;
* every effect the core can return is named in the architecture doc.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from federation import effects

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
FIRST_PARTY = ("common", "store", "federation", "daemon", "cli", "bench")

# room -> the rooms and packages it may import besides itself and common.
ROOMS: dict[str, set[str]] = {
    "daemon/schemas/": set(),
    "daemon/runtime/": {"federation", "daemon/settings.py"},
    "daemon/peer/": {"federation", "daemon/runtime/"},
    "daemon/webhooks/": {"store", "daemon/schemas/"},
    "daemon/identity/": {"store", "daemon/schemas/", "daemon/settings.py"},
    "daemon/http/": {"store", "daemon/runtime/", "daemon/schemas/", "daemon/settings.py",
                     "daemon/webhooks/"},
    "daemon/settings.py": {"daemon/http/", "daemon/identity/", "daemon/webhooks/"},
    "daemon/ports.py": {"store", "daemon/settings.py"},
    "daemon/services/": {"federation", "store", "daemon/ports.py", "daemon/schemas/",
                         "daemon/settings.py"},
    "daemon/replication/": {"federation", "store", "daemon/http/", "daemon/peer/",
                            "daemon/runtime/", "daemon/settings.py"},
    "daemon/lanes/": {"federation", "store", "daemon/http/", "daemon/identity/",
                      "daemon/replication/", "daemon/runtime/",
                      "daemon/schemas/", "daemon/services/", "daemon/settings.py",
                      "daemon/webhooks/"},
    "daemon/node.py": {"federation", "store", "daemon/http/", "daemon/identity/", "daemon/lanes/",
                       "daemon/peer/",
                       "daemon/replication/", "daemon/runtime/", "daemon/services/",
                       "daemon/settings.py", "daemon/webhooks/"},
    "daemon/api/": {"federation", "daemon/http/", "daemon/identity/", "daemon/lanes/",
                    "daemon/node.py",
                    "daemon/peer/", "daemon/replication/", "daemon/runtime/", "daemon/schemas/",
                    "daemon/services/", "daemon/webhooks/"},
    "daemon/mcp/": {"daemon/api/", "daemon/http/", "daemon/lanes/", "daemon/node.py",
                    "daemon/schemas/",
                    "daemon/services/"},
    "daemon/wiring.py": {"federation", "store", "daemon/http/", "daemon/identity/", "daemon/lanes/",
                         "daemon/node.py", "daemon/peer/", "daemon/replication/",
                         "daemon/runtime/", "daemon/services/", "daemon/settings.py",
                         "daemon/webhooks/"},
    "daemon/server.py": {"daemon/api/", "daemon/http/", "daemon/lanes/", "daemon/replication/",
                         "daemon/runtime/",
                         "daemon/settings.py", "daemon/wiring.py"},
}

# cli module -> the daemon and store modules it may import (besides common and cli).
CLI: dict[str, set[str]] = {
    "cli/serve.py": {"daemon.server", "daemon.settings", "daemon.runtime.systemd",
                     "daemon.runtime.tls", "daemon.lanes.supervisor", "daemon.lanes.resize"},
    "cli/lanes_cmd.py": {"daemon.lanes.resize", "daemon.settings"},
    "cli/mcp_cmd.py": {"daemon.mcp.server", "daemon.mcp.settings", "daemon.mcp.bridge"},
    "cli/hooks.py": {"daemon.mcp.settings"},
    "cli/identity.py": {"daemon.identity.bootstrap", "daemon.identity.secrets", "daemon.settings",
                        "store.db", "store.schema"},
    "cli/backup.py": {"daemon.peer.auth", "store.backup", "daemon.lanes.layout"},
    "cli/node_config.py": {"daemon.settings"},
}
CLI_TOP_LEVEL_OK = {"cli/hooks.py"}  # daemon/mcp/settings.py imports only common

# Modules that read wall time, each for a reason docs/architecture.md gives.
WALL_CLOCK_READERS = {
    "daemon/runtime/clock.py", "daemon/replication/joining.py", "daemon/replication/seeding.py",
    "daemon/identity/bootstrap.py", "daemon/identity/replicated_directory.py",
    "daemon/wiring.py", "store/db.py", "store/backup.py", "common/randomid.py",
    "common/certs.py", "cli/backup.py", "cli/hooks.py", "cli/listen_exec.py",
    "cli/node_config.py", "daemon/lanes/resize.py",
}
API_MODULES_WITH_MODELS = {"mail.py", "streams.py", "subscriptions.py", "sync.py", "webui.py"}


# -- reading the source -------------------------------------------------------------
def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(source: str) -> list[tuple[int, str, bool]]:
    """(line, imported module, at module level) for each first-party import
    outside ``if TYPE_CHECKING:``; ``from daemon import x`` counts as ``daemon.x``."""
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit_one(sub, top)
                continue
            visit_one(child, top)

    def visit_one(node: ast.AST, top: bool) -> None:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = ([f"{node.module}.{a.name}" for a in node.names]
                     if node.module in FIRST_PARTY else [node.module])
        found.extend((node.lineno, n, top) for n in names if n.split(".")[0] in FIRST_PARTY)
        nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        visit(node, top and not nested)

    visit(ast.parse(source), True)
    return found


def room_of(name: str) -> str:
    """The room an imported dotted name (or a repo path) belongs to."""
    parts = name.removesuffix(".py").replace("/", ".").split(".")
    if parts[0] != "daemon":
        return parts[0]
    if len(parts) == 1 or parts[1] == "__init__":
        return "daemon/__init__.py"
    if (ROOT / "daemon" / parts[1]).is_dir():
        return f"daemon/{parts[1]}/"
    return f"daemon/{parts[1]}.py"


def room_offences(path: str, source: str) -> list[str]:
    room = room_of(path)
    allowed = ROOMS.get(room, set()) | {room, "common"}
    return [f"{path}:{line} imports {name}" for line, name, _ in imports(source)
            if room_of(name) not in allowed]


def cli_offences(path: str, source: str) -> list[str]:
    allowed = CLI.get(path, set())
    out = []
    for line, name, top in imports(source):
        if name.split(".")[0] in ("common", "cli"):
            continue
        if not any(name == a or name.startswith(a + ".") for a in allowed):
            out.append(f"{path}:{line} imports {name}")
        elif top and path not in CLI_TOP_LEVEL_OK:
            out.append(f"{path}:{line} imports {name} at module level (import it in the command)")
    return out


def wall_clock_reads(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            base = node.value
            base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if (base_name == "time" and node.attr in ("time", "time_ns")) or (
                    base_name == "datetime" and node.attr in ("now", "utcnow", "today")):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [f"line {node.lineno}: from time import {a.name}" for a in node.names
                      if a.name in ("time", "time_ns")]
    return found


def relpath(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# -- the checks can fail -------------------------------------------------------------
def test_the_checks_can_fail() -> None:
    assert room_offences("daemon/peer/link.py", "from daemon.node import Node\n") == [
        "daemon/peer/link.py:1 imports daemon.node"]
    assert room_offences("daemon/schemas/ids.py", "import store.db\nfrom daemon import tls\n") == [
        "daemon/schemas/ids.py:1 imports store.db", "daemon/schemas/ids.py:2 imports daemon.tls"]
    assert room_offences("daemon/services/mail.py", "def f():\n    from daemon.api import x\n")
    assert room_offences("daemon/http/appkeys.py",
                         "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from daemon.node import Node\n") == []
    assert room_offences("daemon/peer/client.py", "import asyncio\nfrom common import limits\n"
                         "from daemon.peer.auth import sign\n") == []
    assert cli_offences("cli/message.py", "def f():\n    from daemon.settings import x\n")
    assert cli_offences("cli/serve.py", "from daemon.server import run\n")  # not in the command
    assert cli_offences("cli/serve.py", "def f():\n    from daemon.server import run\n") == []
    assert cli_offences("cli/backup.py", "def f():\n    from store.db import Store\n")
    assert wall_clock_reads("import time\nx = time.time()\ny = time.monotonic()\n") == [
        "line 2: time.time"]
    assert wall_clock_reads("from datetime import datetime\nd = datetime.now()\n")
    assert wall_clock_reads("from time import time\n")


# -- the doc and these tables agree --------------------------------------------------
def doc_table(title: str) -> dict[str, set[str]]:
    """The rows of the markdown table under the heading ``title``: first
    cell -> the backticked names of the last cell (``-`` for none)."""
    text = DOC.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    rows: dict[str, set[str]] = {}
    for line in text[start:end if end > 0 else None].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        rows[cells[0].strip("`")] = set(re.findall(r"`([^`]+)`", cells[-1]))
    return rows


def test_the_doc_states_the_room_rules() -> None:
    assert doc_table("Rooms of daemon/") == {
        room: {name if "/" in name else f"{name}/" for name in allowed}
        for room, allowed in ROOMS.items()}


def test_the_doc_states_the_cli_rules() -> None:
    assert doc_table("What cli/ may import") == CLI


def test_every_daemon_module_is_in_a_room() -> None:
    stray = {relpath(p) for p in modules("daemon")
             if room_of(relpath(p)) not in ROOMS and relpath(p) != "daemon/__init__.py"}
    assert stray == set(), "add the room to ROOMS and to docs/architecture.md"


# -- the rules hold ------------------------------------------------------------------
@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_imports_only_what_it_may(room: str) -> None:
    paths = [ROOT / room] if room.endswith(".py") else modules(room)
    offenders = [o for p in paths for o in room_offences(relpath(p), p.read_text())]
    assert offenders == [], f"{room} breaks its import rule:\n" + "\n".join(offenders)


def test_cli_imports_only_what_it_may() -> None:
    offenders = [o for p in modules("cli") for o in cli_offences(relpath(p), p.read_text())]
    assert offenders == [], "cli/ breaks its import rule:\n" + "\n".join(offenders)


def test_wall_time_is_read_only_where_the_doc_says() -> None:
    readers = {relpath(p) for pkg in ("common", "store", "federation", "daemon", "cli")
               for p in modules(pkg) if wall_clock_reads(p.read_text())}
    assert readers == WALL_CLOCK_READERS, (
        "a new wall-clock read: take the time from the node's Clock (or a now_ms "
        "argument), or say why in docs/architecture.md and WALL_CLOCK_READERS")


def test_api_models_live_where_the_doc_says() -> None:
    defining = set()
    for path in modules("daemon/api"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(b) in ("Strict", "Lenient", "BaseModel", "ProjectQuery")
                    for b in node.bases):
                defining.add(path.name)
    assert defining == API_MODULES_WITH_MODELS


def test_the_doc_names_every_effect() -> None:
    text = DOC.read_text()
    names = [t.__name__ for t in effects.Effect.__args__]  # type: ignore[attr-defined]
    assert [n for n in names if f"`{n}`" not in text] == []
