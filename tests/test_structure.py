"""Structural rules of the code base, checked on the source itself.

* ``federation/`` is the pure core: none of its modules may import asyncio,
  time, socket or aiohttp (or anything under them), so its decisions are
  functions of their inputs and the simulator can drive it.
* No function outside ``tests/`` is longer than ``FUNCTION_LINES_MAX``
  lines: a longer one is doing several jobs and should be split.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "store", "federation", "daemon", "cli", "bench")
FORBIDDEN_IN_CORE = ("asyncio", "time", "socket", "aiohttp")
FUNCTION_LINES_MAX = 80
# Known offenders left for their owners to split, as "path:function". Empty:
# keep it so. Remove entries once split; never add new ones.
PENDING_SPLIT: set[str] = set()


def _modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if ".venv" not in p.parts)


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def forbidden_imports(source: str) -> list[str]:
    found = []
    for line, name in _imported(ast.parse(source)):
        top = name.split(".")[0]
        if top in FORBIDDEN_IN_CORE:
            found.append(f"line {line}: {name}")
    return found


def long_functions(source: str, limit: int = FUNCTION_LINES_MAX) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append(f"{node.name} (line {node.lineno}, {length} lines)")
    return found


def test_the_checks_can_fail() -> None:
    assert forbidden_imports("import asyncio\nfrom time import monotonic\nimport os\n") == [
        "line 1: asyncio", "line 2: time"]
    assert forbidden_imports("from aiohttp.web import Application\nimport socket as s\n") == [
        "line 1: aiohttp.web", "line 2: socket"]
    assert forbidden_imports("import timeit\nfrom . import time\n") == []
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES_MAX))
    assert long_functions(f"def f():\n{body}\n") == [f"f (line 1, {FUNCTION_LINES_MAX + 1} lines)"]
    assert long_functions("def g():\n    return 1\n") == []


@pytest.mark.parametrize("path", _modules("federation"), ids=lambda p: p.name)
def test_federation_imports_no_io(path: Path) -> None:
    assert forbidden_imports(path.read_text()) == [], (
        f"{path.relative_to(ROOT)} imports I/O or clocks; the core must stay pure")


def test_no_function_is_longer_than_the_limit() -> None:
    offenders = []
    for package in PACKAGES:
        for path in _modules(package):
            rel = path.relative_to(ROOT).as_posix()
            offenders += [f"{rel}: {f}" for f in long_functions(path.read_text())
                          if f"{rel}:{f.split(' ')[0]}" not in PENDING_SPLIT]
    assert offenders == [], "split these functions:\n" + "\n".join(offenders)


@pytest.mark.parametrize("path", _modules("daemon"), ids=lambda p: str(p.relative_to(ROOT)))
def test_daemon_imports_nothing_from_cli(path: Path) -> None:
    names = [name for _, name in _imported(ast.parse(path.read_text()))]
    assert not [n for n in names if n.split(".")[0] == "cli"], (
        f"{path.relative_to(ROOT)} imports cli: the daemon must not depend on its client")


# Which first-party packages each package may import: the layers of
# docs/architecture.md. The protocol's vocabulary (common.ops) sits below both
# the store that applies it and the core that issues it.
ALLOWED_LAYERS = {
    "common": {"common"},
    "store": {"common", "store"},
    "federation": {"common", "federation"},
}


@pytest.mark.parametrize("package", sorted(ALLOWED_LAYERS))
def test_lower_layers_import_only_what_they_may(package: str) -> None:
    first_party = set(PACKAGES)
    offenders = []
    for path in _modules(package):
        for line, name in _imported(ast.parse(path.read_text())):
            top = name.split(".")[0]
            if top in first_party and top not in ALLOWED_LAYERS[package]:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert offenders == [], "layering broken:\n" + "\n".join(offenders)


# -- ports: services take narrow protocols, handlers never touch the store ---------
@pytest.mark.parametrize("path", _modules("daemon/services"), ids=lambda p: str(p.relative_to(ROOT)))
def test_services_do_not_import_the_node(path: Path) -> None:
    names = [name for _, name in _imported(ast.parse(path.read_text()))]
    assert "daemon.node" not in names, (
        f"{path.relative_to(ROOT)} imports daemon.node: a service takes the ports of "
        "daemon/ports.py, not the whole node")


def store_accesses(source: str) -> list[str]:
    """Every ``<x>.store`` attribute access, except the settings section
    ``settings.store`` (the database path, not the store)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "store":
            base = node.value
            named = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            if named != "settings":
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_store_check_can_fail() -> None:
    assert store_accesses("async def f(node):\n    await node.store.message('x')\n")
    assert store_accesses("def f(request):\n    return request.app[NODE].store\n")
    assert not store_accesses("def f(node):\n    return node.settings.store.db_path\n")


@pytest.mark.parametrize("path", _modules("daemon/api") + _modules("daemon/mcp"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_handlers_never_touch_the_store(path: Path) -> None:
    found = store_accesses(path.read_text())
    assert found == [], (f"{path.relative_to(ROOT)} reaches the store: go through a "
                         "daemon/services function\n" + "\n".join(found))


@pytest.mark.parametrize("path", _modules("daemon/api") + _modules("daemon/mcp"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_handlers_import_nothing_from_the_store_package(path: Path) -> None:
    names = [name for _, name in _imported(ast.parse(path.read_text()))]
    assert not [n for n in names if n.split(".")[0] == "store"], (
        f"{path.relative_to(ROOT)} imports store: SQLite is reached through daemon/services")


@pytest.mark.parametrize("path", _modules("daemon/services"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_services_import_no_http_layer(path: Path) -> None:
    """Services are called by HTTP, MCP and the web alike: aiohttp stays in the handlers."""
    names = [name for _, name in _imported(ast.parse(path.read_text()))]
    assert not [n for n in names if n.split(".")[0] == "aiohttp" or n.startswith("daemon.api")], (
        f"{path.relative_to(ROOT)} imports the HTTP layer")
