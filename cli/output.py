"""How the CLI prints: raw JSON for ``--json``, aligned tables and indented text otherwise.

Results go to stdout, diagnostics and hints to stderr, so a pipe receives
only data. Errors from :mod:`common.errors` are printed here too, in one
shape: a first line with the message, then the extra fields the daemon sent
(``got``/``needed`` of a quorum failure, the ``hint`` of a refused scope).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click

from common.errors import AiMemoryError


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))


def note(text: str) -> None:
    """A remark for the human at the terminal, never part of the data."""
    click.echo(text, err=True)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return " ".join(f"{k}={cell(v)}" for k, v in value.items()) or "-"
    return str(value)


def table(rows: Iterable[Mapping[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Render ``rows`` as left-aligned columns; ``columns`` pairs (key, header)."""
    rendered = [[cell(row.get(key)) for key, _ in columns] for row in rows]
    headers = [header for _, header in columns]
    widths = [
        max(len(h), *(len(r[i]) for r in rendered)) if rendered else len(h)
        for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rendered
    ]
    return "\n".join(lines)


def indent(text: str, prefix: str = "    ") -> str:
    return textwrap.indent(text, prefix, lambda _line: True)


def print_error(exc: AiMemoryError) -> None:
    details = dict(exc.details)
    status = details.pop("status", None)
    labels = [exc.code] if exc.code != exc.message else []
    if status:
        labels.append(f"HTTP {status}")
    suffix = f" ({', '.join(labels)})" if labels else ""
    click.echo(f"error: {exc.message}{suffix}", err=True)
    for key, value in details.items():
        if key == "hint":
            continue
        click.echo(f"  {key}: {cell(value)}", err=True)
    if "hint" in details:
        click.echo(f"hint: {details['hint']}", err=True)
