"""Free text for a command: the positional argument, or else standard input.

``ai-memory notify bob --title hi "text"`` and ``echo text | ai-memory
notify bob --title hi`` send the same payload. Reading from an interactive
terminal is refused rather than left waiting for input nobody knows to type.
"""

from __future__ import annotations

import sys

from common.errors import BadRequest


def read_body(argument: str | None, what: str) -> str:
    """Return ``argument`` if given, else all of stdin; refuse an empty result."""
    if argument is not None:
        text = argument
    else:
        stream = sys.stdin
        if stream is None or stream.isatty():
            raise BadRequest(f"no {what}: pass it as an argument or pipe it on stdin")
        text = stream.read()
        if text.endswith("\n") and not text.endswith("\n\n"):
            text = text[:-1]  # `echo` adds one newline; keep deliberate blank lines
    if not text.strip():
        raise BadRequest(f"the {what} is empty")
    return text
