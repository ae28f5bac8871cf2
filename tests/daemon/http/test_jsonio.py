"""The API's JSON in and out (daemon/http/jsonio.py) answers exactly as the
standard library did: the same value of the same types for every body
``json.loads`` reads, the same refusal for every body it refuses, and a
response body every parser reads as what ``json.dumps`` wrote."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.http import jsonio


def _same(raw: bytes) -> None:
    try:
        want: tuple[str, Any] = ("value", json.loads(raw))
    except Exception as e:  # the refusal to match
        want = ("error", type(e))
    try:
        got: tuple[str, Any] = ("value", jsonio.loads(raw))
    except Exception as e:
        got = ("error", type(e))
    assert got == want, raw[:80]
    if want[0] == "value":
        assert repr(got[1]) == repr(want[1]), raw[:80]  # 1 and 1.0, -0.0 and 0.0 told apart


@pytest.mark.parametrize("raw", [
    b'{"a": 99999999999999999999}',  # past 64 bits: exact, as in json
    b'{"a": -9223372036854775809}',
    b'{"a": 9223372036854775807}',
    b'{"a": 1234567890123456789.5}',
    b'{"a": 1e400}', b'{"a": NaN}', b'{"a": -Infinity}',
    b'{"a": "\\ud800"}',  # a lone surrogate: json reads it, msgspec refuses
    b'{"a": 1, "a": 2}', b'{"a": -0}', b'{"a": -0.0}', b'{"a": 1.0}', b'{"a": 1E2}',
    '{"a": "é"}'.encode("utf-16"), '{"a": "é"}'.encode("utf-8-sig"), '{"a": "é"}'.encode(),
    b"[" * 2000 + b"]" * 2000,  # json: RecursionError, as before
    b"[" * 300 + b"]" * 300, b"[" * 600 + b"]" * 600,
    b"[" + b"{}," * 600 + b"{}]",  # many brackets, shallow: json reads it
    b"", b"   ", b"{", b'{"a": }', b"\xff\xfe\xfd", b'{"a": "\x01"}', b"nul", b"[1,]",
    b'{"priority": ' + b"9" * 5000 + b"}",  # past Python's digit limit: ValueError, as before
])
def test_a_body_reads_as_json_loads_reads_it(raw: bytes) -> None:
    _same(raw)


_leaf = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
         | st.text())
_doc = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(doc=_doc, ascii_only=st.booleans())
def test_any_document_reads_as_json_loads_reads_it(doc: Any, ascii_only: bool) -> None:
    _same(json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None)
@given(doc=_doc)
def test_any_value_writes_as_json_dumps_writes_it(doc: Any) -> None:
    assert json.loads(jsonio.dumps(doc)) == json.loads(json.dumps(doc))


class _Text(str):
    pass


@pytest.mark.parametrize("value", [
    {"a": 2**70}, {"a": "\ud800"}, {1: "one", None: "none", 2.5: "x"}, {"t": (1, 2)}, [True, None, -0.0],
    {"s": _Text("a str subclass")}, {"k": {"é": ["\u2028", "\x7f"]}},
])
def test_what_msgspec_cannot_write_is_written_by_json(value: Any) -> None:
    assert json.loads(jsonio.dumps(value)) == json.loads(json.dumps(value))


def test_what_json_cannot_write_is_still_a_type_error() -> None:
    with pytest.raises(TypeError):
        jsonio.dumps({"a": object()})


def test_the_response_has_json_dumps_headers() -> None:
    r = jsonio.json_response({"é": [1, 2]}, status=201, headers={"Retry-After": "1"})
    assert (r.status, r.headers["Content-Type"], r.headers["Retry-After"]) == (
        201, "application/json; charset=utf-8", "1")
    assert isinstance(r.body, bytes) and json.loads(r.body) == {"é": [1, 2]}
