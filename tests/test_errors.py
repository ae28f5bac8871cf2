"""The error tree drawn in common/errors.py's docstring is the real one.

Every class of the module that is an ``AiMemoryError`` appears once in the
drawing, under its direct base, with its HTTP status where one is drawn.
"""

from __future__ import annotations

import inspect
import re

from common import errors

# A drawn line: tree glyphs, a class name, then an optional status column.
_LINE = re.compile(r"^(?P<lead>[ │├└─]*)(?P<name>[A-Z]\w*)\s*(?P<status>\d{3})?\b")


def drawn_tree(doc: str) -> dict[str, tuple[str | None, int | None]]:
    """name -> (drawn parent, drawn status), from the docstring's ``::`` block."""
    block = doc.split("::\n", 1)[1].strip("\n").split("\n\n", 1)[0]
    out: dict[str, tuple[str | None, int | None]] = {}
    stack: list[str] = []
    for line in block.splitlines():
        m = _LINE.match(line)
        assert m, f"not a tree line: {line!r}"
        depth = len(m["lead"]) // 4 - 1  # four columns of indent, four per level
        del stack[depth:]
        parent = stack[-1] if stack else None
        assert m["name"] not in out, f"{m['name']} drawn twice"
        out[m["name"]] = (parent, int(m["status"]) if m["status"] else None)
        stack.append(m["name"])
    return out


def real_tree() -> dict[str, type[errors.AiMemoryError]]:
    return {name: cls for name, cls in inspect.getmembers(errors, inspect.isclass)
            if issubclass(cls, errors.AiMemoryError) and cls.__module__ == errors.__name__}


def test_the_parser_reads_depth_and_status() -> None:
    doc = "x\n\n::\n\n    A\n    ├── B        400   b\n    │   └── C    409   c\n    └── D\n\nend"
    assert drawn_tree(doc) == {"A": (None, None), "B": ("A", 400), "C": ("B", 409),
                               "D": ("A", None)}


def test_the_drawn_error_tree_matches_the_classes() -> None:
    assert errors.__doc__ is not None
    drawn = drawn_tree(errors.__doc__)
    real = real_tree()
    assert set(drawn) == set(real), "drawn but not defined, or defined but not drawn"
    for name, cls in real.items():
        parent, status = drawn[name]
        base = cls.__bases__[0]
        expected = None if base is Exception else base.__name__
        assert parent == expected, f"{name} is drawn under {parent}, subclasses {expected}"
        if status is not None:
            assert status == cls.status, f"{name} drawn with {status}, has {cls.status}"
