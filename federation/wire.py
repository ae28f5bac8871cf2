"""Wire codecs derived from dataclass fields: one mechanism for every message.

A :class:`Codec` reads a frozen dataclass's fields (``dataclasses.fields``
and their resolved type hints) once and builds a converter per field from
its type, so a message kind is written down once, as its dataclass, and its
wire form follows:

* ``str``, ``int``, ``bool``: themselves, checked strictly (``True`` is not
  an int here);
* ``X | None``: ``None`` or the wire form of ``X``;
* ``tuple[X, ...]`` / ``list[X]``: a list; ``tuple[A, B]``: a list of
  exactly two (an op id ``(origin, seq)`` is ``[origin, seq]``);
* ``dict[K, V]``: a map (a version vector is ``{origin: seq}``); ``Any``
  values are plain msgpack data, passed through;
* :class:`common.ops.Op`: :meth:`Op.to_wire`, each element checked on the
  way in (a kind this build does not know passes if its name is well
  formed: a newer peer's ops are kept, see :mod:`common.ops`).

A field may name its own converter in ``field(metadata={"wire": (encode,
decode)})``. Two layouts carry the fields: ``list`` (``[tag, f1, f2, ...]``,
positional, the compact form of peer messages) and ``map``
(``{"type": tag, "fields": {name: value}}``, the form of forwarded mailbox
requests). Trailing fields with defaults may be absent on the way in, so a
node that knows a newer field still reads an older peer's message; unknown
extra fields are refused. A :class:`Registry` maps tags to codecs.

Anything malformed raises :class:`WireError` (a ``ValueError``) that names
the kind and the field, never a ``TypeError`` from deep inside. Pure: no
I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, Literal

from common.ops import Op, valid_kind_name

Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]
Conv = tuple[Encode, Decode]
Layout = Literal["list", "map"]


class WireError(ValueError):
    """A message that does not match its kind's wire form."""


def _same(value: Any) -> Any:
    return value


_SCALAR_OF: dict[Decode, type] = {}  # a scalar decoder -> the type it checks


def _scalar(kind: type) -> Conv:
    def decode(raw: Any) -> Any:
        if (isinstance(raw, bool) and kind is not bool) or not isinstance(raw, kind):
            raise WireError(f"expected {kind.__name__}, got {type(raw).__name__}")
        return raw
    _SCALAR_OF[decode] = kind
    return _same, decode


def _optional(inner: Conv) -> Conv:
    enc, dec = inner
    return (lambda v: None if v is None else enc(v)), (lambda r: None if r is None else dec(r))


def _as_list(raw: Any, what: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(raw, list | tuple):
        raise WireError(f"expected a list ({what}), got {type(raw).__name__}")
    return raw


def _sequence(inner: Conv, make: Callable[[Iterable[Any]], Any]) -> Conv:
    enc, dec = inner
    if enc is _same and dec is _same:
        return list, (lambda r: make(_as_list(r, "items")))
    return (lambda v: [enc(x) for x in v]), (lambda r: make([dec(x) for x in _as_list(r, "items")]))


def _fixed(items: tuple[Conv, ...]) -> Conv:
    def encode(value: Any) -> list[Any]:
        return [enc(x) for (enc, _), x in zip(items, value, strict=True)]

    def decode(raw: Any) -> tuple[Any, ...]:
        raw = _as_list(raw, f"{len(items)} items")
        if len(raw) != len(items):
            raise WireError(f"expected {len(items)} items, got {len(raw)}")
        return tuple([dec(x) for (_, dec), x in zip(items, raw, strict=True)])

    kinds = tuple(_SCALAR_OF.get(dec) for _, dec in items)
    if len(kinds) != 2 or None in kinds or bool in kinds:
        return encode, decode
    first, second = kinds

    def pair(raw: Any) -> tuple[Any, ...]:
        # Two plain scalars (an op id is [origin, seq]): exact types, the
        # general path only to word the error.
        if ((type(raw) is list or type(raw) is tuple) and len(raw) == 2
                and type(raw[0]) is first and type(raw[1]) is second):
            return (raw[0], raw[1])
        return decode(raw)
    return encode, pair


def _mapping(key: Conv, val: Conv) -> Conv:
    kenc, kdec = key
    venc, vdec = val

    def decode(raw: Any) -> dict[Any, Any]:
        if not isinstance(raw, dict):
            raise WireError(f"expected a map, got {type(raw).__name__}")
        return {kdec(k): vdec(v) for k, v in raw.items()}

    kkind, vkind = _SCALAR_OF.get(kdec), _SCALAR_OF.get(vdec)
    if kenc is not _same or venc is not _same or kkind in (None, bool) or not (
            vdec is _same or vkind not in (None, bool)):
        return (lambda v: {kenc(k): venc(x) for k, x in v.items()}), decode

    def plain(raw: Any) -> dict[Any, Any]:
        # Scalar keys and plain or scalar values (a body, a version vector):
        # exact types in one pass, the general path only to word the error.
        if type(raw) is dict and all(type(k) is kkind for k in raw) and (
                vdec is _same or all(type(v) is vkind for v in raw.values())):
            return dict(raw)
        return decode(raw)
    return dict, plain


_STR = _scalar(str)
_BODY = _mapping(_STR, (_same, _same))


_KINDS_SEEN: set[str] = set()  # well-formed kind names met so far (bounded)


def _op_from_wire(raw: Any) -> Op:
    # The hot path of replication (every op of every batch): checks inlined,
    # exact types (msgpack yields exact str and int), and a kind name is
    # checked against its pattern only the first time it is met.
    if (type(raw) is not list and type(raw) is not tuple) or len(raw) != 7:
        raise WireError("an op is [origin, seq, hlc, kind, key, epoch, body]")
    origin, seq, hlc, kind, key, epoch, body = raw
    if type(kind) is not str or kind not in _KINDS_SEEN:
        if not valid_kind_name(kind):  # unknown but well-formed kinds are kept (common/ops.py)
            raise WireError(f"malformed op kind {kind!r}")
        if len(_KINDS_SEEN) < 256:
            _KINDS_SEEN.add(kind)
    if (type(origin) is not str or type(key) is not str or type(seq) is not int
            or type(hlc) is not int or type(epoch) is not int):
        raise WireError("an op's origin and key are strings, its seq, hlc and epoch ints")
    if type(body) is not dict or not all(type(k) is str for k in body):
        raise WireError("an op's body is a map with string keys")
    return Op(origin, seq, hlc, kind, key, dict(body), epoch)


OP: Conv = (Op.to_wire, _op_from_wire)


def converter(tp: Any) -> Conv:
    """The converter for a (resolved) field type; TypeError if none fits,
    raised when the codec is built, not when a message arrives."""
    if tp is Any:
        return _same, _same
    if tp is Op:
        return OP
    if tp in (str, int, bool, float):
        return _scalar(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return _optional(converter(rest[0]))
    elif origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence(converter(args[0]), tuple)
        return _fixed(tuple(converter(a) for a in args))
    elif origin is list:
        return _sequence(converter(args[0]), list)
    elif origin is dict:
        return _mapping(converter(args[0]), converter(args[1]))
    raise TypeError(f"no wire converter for {tp!r}")


class Codec:
    """The wire form of one dataclass, from its fields."""

    def __init__(self, cls: type, tag: str, layout: Layout = "list") -> None:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} is not a dataclass")
        hints = typing.get_type_hints(cls)
        self.cls, self.tag, self.layout = cls, tag, layout
        self.fields: list[tuple[str, Conv, bool]] = []
        for f in dataclasses.fields(cls):
            conv = f.metadata.get("wire") or converter(hints[f.name])
            optional = (f.default is not dataclasses.MISSING
                        or f.default_factory is not dataclasses.MISSING)
            self.fields.append((f.name, conv, optional))
        self.convs = {name: conv for name, conv, _ in self.fields}
        self.required = sum(1 for _, _, optional in self.fields if not optional)
        # The hot path (every peer message, both ways) skips identity
        # converters and, for the list layout, builds the object positionally.
        self._encoders = tuple((name, None if enc is _same else enc)
                               for name, (enc, _), _ in self.fields)
        self._decoders = tuple((name, None if dec is _same else dec)
                               for name, (_, dec), _ in self.fields)
        self._positional = all(f.init and not f.kw_only for f in dataclasses.fields(cls))

    def encode(self, obj: Any) -> Any:
        values = [getattr(obj, name) if enc is None else enc(getattr(obj, name))
                  for name, enc in self._encoders]
        if self.layout == "list":
            values.insert(0, self.tag)
            return values
        return {"type": self.tag, "fields": dict(zip(self.convs, values, strict=True))}

    def decode(self, raw: Any) -> Any:
        """The object ``raw`` (as :meth:`encode` makes it) describes."""
        if self.layout == "list" and self._positional:
            self._check_list(raw)
            args = raw[1:] if type(raw) is list else list(raw[1:])
            i = 0
            try:
                for i, (_, dec) in enumerate(self._decoders[:len(args)]):
                    if dec is not None:
                        args[i] = dec(args[i])
            except WireError as exc:
                raise WireError(f"malformed {self.tag!r} message, field "
                                f"{self._decoders[i][0]}: {exc}") from None
            return self.cls(*args)
        values: dict[str, Any] = {}
        for name, item in self._items(raw).items():
            try:
                values[name] = self.convs[name][1](item)
            except WireError as exc:
                raise WireError(f"malformed {self.tag!r} message, field {name}: {exc}") from None
        missing = [n for n, _, optional in self.fields if not optional and n not in values]
        if missing:
            raise WireError(f"malformed {self.tag!r} message: missing {', '.join(missing)}")
        return self.cls(**values)

    def _check_list(self, raw: Any) -> None:
        if not isinstance(raw, list | tuple) or not raw or raw[0] != self.tag:
            raise WireError(f"malformed {self.tag!r} message: not a list tagged {self.tag!r}")
        if not self.required <= len(raw) - 1 <= len(self.fields):
            raise WireError(f"malformed {self.tag!r} message: {len(raw) - 1} fields, "
                            f"expected {self.required}..{len(self.fields)}")

    def _items(self, raw: Any) -> dict[str, Any]:
        """Field name -> raw value, for the fields ``raw`` carries."""
        names = [n for n, _, _ in self.fields]
        if self.layout == "list":
            self._check_list(raw)
            return dict(zip(names, raw[1:], strict=False))
        if not isinstance(raw, dict) or raw.get("type") != self.tag or not isinstance(
                raw.get("fields"), dict):
            raise WireError(f"malformed {self.tag!r} message: not a map of type and fields")
        extra = set(raw["fields"]) - set(names)
        if extra:
            raise WireError(f"malformed {self.tag!r} message: unknown fields "
                            f"{', '.join(sorted(map(str, extra)))}")
        return dict(raw["fields"])


class Registry:
    """Tags -> codecs for one family of messages (``what`` names it in errors)."""

    def __init__(self, what: str, classes: Iterable[type], *, layout: Layout = "list",
                 tag: Callable[[type], str] = lambda cls: str(cls.TAG)) -> None:  # type: ignore[attr-defined]
        self.what = what
        self.by_tag: dict[str, Codec] = {}
        self.by_class: dict[type, Codec] = {}
        for cls in classes:
            codec = Codec(cls, tag(cls), layout)
            if codec.tag in self.by_tag:
                raise TypeError(f"two {what} kinds tagged {codec.tag!r}")
            self.by_tag[codec.tag] = self.by_class[cls] = codec

    def encode(self, obj: Any) -> Any:
        codec = self.by_class.get(type(obj))
        if codec is None:
            raise TypeError(f"{type(obj).__name__} is not a {self.what}")
        return codec.encode(obj)

    def decode(self, raw: Any) -> Any:
        """The message ``raw`` describes; :class:`WireError` if it is malformed
        or of an unknown kind."""
        if isinstance(raw, list | tuple):
            tag = raw[0] if raw else None
        elif isinstance(raw, dict):
            tag = raw.get("type")
        else:
            raise WireError(f"a {self.what} is a list or map, got {type(raw).__name__}")
        codec = self.by_tag.get(tag) if isinstance(tag, str) else None
        if codec is None:
            raise WireError(f"unknown {self.what} kind {tag!r}")
        return codec.decode(raw)
