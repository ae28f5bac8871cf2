"""The mail vocabulary is defined once (common/vocab.py) and every layer
agrees with it: the places that must spell a field list out (a dataclass, a
pydantic model, an MCP tool signature, CLI options, SQL columns) are held
to the one definition here, and no source module spells the enums again."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sqlite3
import typing
from pathlib import Path

import click
import pytest

from cli.message import send as cli_send
from common import vocab
from daemon.api.mail import ListIn, SendIn
from daemon.mcp.tools import Tools
from daemon.services.mail import SendRequest
from daemon.services.scope import INFERRED
from store import records
from store.schema import migrate

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("common", "store", "federation", "daemon", "cli")


def test_send_fields_are_the_same_in_every_layer() -> None:
    assert {f.name for f in dataclasses.fields(SendRequest)} == set(vocab.SEND_FIELDS)
    assert tuple(SendIn.model_fields) == vocab.SEND_FIELDS
    tool = inspect.signature(Tools.memory_message_send).parameters
    assert set(tool) - {"self"} == set(vocab.SEND_FIELDS)
    # --json and --idempotency-key shape the request, not the message (the key is a header).
    options = {p.name for p in cli_send.params} - {"as_json", "idempotency_key"}
    assert options <= set(vocab.SEND_FIELDS), options - set(vocab.SEND_FIELDS)


def test_enums_reach_every_layer_from_one_definition() -> None:
    assert vocab.NATURES == ("measured", "reported", "inferred", "unknown")
    assert vocab.MEASURED in vocab.NATURES and vocab.NATURE_DEFAULT in vocab.NATURES
    nature = next(p for p in cli_send.params if p.name == "nature")
    assert isinstance(nature.type, click.Choice) and tuple(nature.type.choices) == vocab.NATURES
    assert typing.get_args(SendIn.model_fields["nature"].annotation) == vocab.NATURES
    assert typing.get_args(ListIn.model_fields["box"].annotation) == vocab.BOXES
    assert records.MESSAGE_FIELDS is vocab.MESSAGE_FIELDS
    assert records.EMPTY_FIELDS is vocab.EMPTY_FIELDS and records.NOTE_FIELDS is vocab.NOTE_FIELDS
    assert INFERRED <= set(vocab.SCOPE_SOURCES) and "explicit" not in INFERRED


def test_store_columns_hold_every_message_field(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "v.db")
    migrate(conn)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(messages)")}
    assert set(vocab.MESSAGE_FIELDS) <= columns, set(vocab.MESSAGE_FIELDS) - columns
    empty = {row[1] for row in conn.execute("PRAGMA table_info(pop_empty)")}
    assert set(vocab.EMPTY_FIELDS) <= empty, set(vocab.EMPTY_FIELDS) - empty
    conn.close()


def test_a_message_body_has_exactly_the_message_fields() -> None:
    fields = {name: None for name in vocab.MESSAGE_FIELDS}
    assert tuple(vocab.message_body(**fields)) == vocab.MESSAGE_FIELDS
    with pytest.raises(TypeError, match="nature"):
        vocab.message_body(**{k: v for k, v in fields.items() if k != "nature"})
    with pytest.raises(TypeError, match="colour"):
        vocab.message_body(**fields, colour="red")


def _spelled_values(path: Path) -> set[str]:
    """String constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docstrings}


def test_no_source_module_spells_the_natures_again() -> None:
    # (Scope sources are spelled where a scope is made, but typed ScopeSource,
    # so mypy holds each to the one definition.)
    words = set(vocab.NATURES) - {"unknown"}
    offenders = {}
    for package in SOURCES:
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "common" / "vocab.py":
                continue
            found = _spelled_values(path) & words
            if found:
                offenders[str(path.relative_to(ROOT))] = sorted(found)
    assert not offenders, offenders
