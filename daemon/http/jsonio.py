"""JSON in and out of the HTTP API, with msgspec where it gives the same answer.

msgspec parses a request body in about a sixth of the time the standard
library takes (a notify body: 0.36 against 1.9-2.4 us) and writes a
response in about an eighth (a notify's reply: 0.30 against 2.4 us; an
inbox page of 50: 14 against 99 us; docs/performance.md, issue 25). It is
not a drop-in replacement, so each direction falls back to the standard
library wherever the two could differ, and the API answers exactly as
before:

* **in** (:func:`loads`): a body with more than ``_BRACKETS_MAX`` opening
  brackets (nested deep enough to meet the recursion limit, where
  ``json`` refuses it with its own error) goes straight to ``json.loads``,
  and so does anything msgspec refuses: NaN and Infinity literals, numbers
  past a double or past Python's digit limit, lone surrogates, a byte
  order mark, UTF-16 or UTF-32, malformed JSON. ``json.loads`` then
  accepts or refuses it as it always did, with its messages. (Integers of
  any size read exactly, as in ``json``.)
* **out** (:func:`dumps`): whatever msgspec cannot write (a lone
  surrogate, a key that is not a string or a number, a subclass of
  ``str``) is written by ``json.dumps``, which writes it or raises
  ``TypeError`` as before. Output is compact UTF-8 (``json.dumps`` wrote
  ``", "`` separators and ``\\u`` escapes for non-ASCII): the same JSON
  value to every parser. A NaN or infinite float, which ``json.dumps``
  wrote as a bare ``NaN`` that strict parsers refuse, is written as
  ``null``; nothing the API answers holds one (stored values refuse them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web

_BRACKETS_MAX = 512  # a body with more opening brackets may nest as deep as json's recursion limit
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_REFUSED = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


def loads(raw: bytes) -> Any:
    """``json.loads(raw)``'s value, or its exception (see the module docstring)."""
    if raw.count(b"[") + raw.count(b"{") <= _BRACKETS_MAX:
        try:
            return _decode(raw)
        except _REFUSED:
            pass
    return json.loads(raw)


def dumps(value: Any) -> bytes:
    """``value`` as UTF-8 JSON (``TypeError`` for what JSON cannot hold)."""
    try:
        return _encode(value)
    except (TypeError, UnicodeEncodeError, OverflowError, msgspec.EncodeError):
        return json.dumps(value).encode()


def json_response(data: Any, *, status: int = 200,
                  headers: Mapping[str, str] | None = None) -> web.Response:
    """``web.json_response(data, status=..., headers=...)``, written by :func:`dumps`."""
    return web.Response(body=dumps(data), status=status, headers=headers,
                        content_type="application/json", charset="utf-8")
