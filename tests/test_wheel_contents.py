"""The wheel ships the product only: no bench helper inside its packages.

The package list is read from pyproject.toml (``tool.setuptools`` ``find``
includes), so a package added there is checked too.
"""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _wheel_modules() -> list[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    tops = sorted({pattern.rstrip("*").rstrip(".") for pattern in include})
    out = []
    for top in tops:
        for path in (ROOT / top).rglob("*.py"):
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if any(fnmatch.fnmatch(dotted, pattern) for pattern in include):
                out.append(path)
    return sorted(out)


def test_the_wheel_packages_are_found() -> None:
    names = {p.relative_to(ROOT).parts[0] for p in _wheel_modules()}
    assert {"common", "store", "federation", "daemon", "cli"} <= names
    assert "bench" not in names and "tests" not in names


def test_no_bench_helper_ships_in_the_wheel() -> None:
    offenders = []
    for path in _wheel_modules():
        rel = path.relative_to(ROOT)
        if path.stem.startswith("bench"):
            offenders.append(f"{rel}: a bench helper (it belongs under bench/)")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [f"{rel}:{node.lineno} imports {n}" for n in names
                          if n.split(".")[0] in ("bench", "tests")]
    assert offenders == [], "\n".join(offenders)
