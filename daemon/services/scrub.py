"""Secret scrubbing and size capping for cross-project mail.

Mail crosses a project boundary, so credentials must not ride along.
:func:`scrub` replaces anything that looks like a secret with
``[REDACTED:<kind>]`` and counts the replacements; :func:`cap` then bounds
the text and appends a visible marker when it cut something. Scrubbing runs
before capping so a secret cut in half by the cap cannot survive as a
fragment.
"""

from __future__ import annotations

import re

from common import limits

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private_key", re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
        re.S)),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("api_key", re.compile(r"\b(?:sk|pk|rk)-(?:live-|test-|proj-|ant-)?[A-Za-z0-9_\-]{20,}\b")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\b")),
    ("bearer", re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9_\-.=~+/]{16,}")),
    ("url_credentials", re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]+):[^@\s/]+@")),
    ("assignment", re.compile(
        r"(?i)\b((?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token|"
        r"client[_-]?secret|private[_-]?key)\s*[:=]\s*)(\"[^\"\n]{4,}\"|'[^'\n]{4,}'|[^\s,;]{4,})")),
]


def scrub(text: str) -> tuple[str, int]:
    count = 0
    for kind, pattern in _PATTERNS:
        def repl(m: re.Match[str], kind: str = kind) -> str:
            nonlocal count
            count += 1
            if kind == "bearer":
                return f"{m.group(1)} [REDACTED:{kind}]"
            if kind == "url_credentials":
                return f"{m.group(1)}:[REDACTED:{kind}]@"
            if kind == "assignment":
                return f"{m.group(1)}[REDACTED:{kind}]"
            return f"[REDACTED:{kind}]"

        text = pattern.sub(repl, text)
    return text, count


def cap(text: str, max_chars: int) -> tuple[str, bool]:
    if len(text) <= max_chars:
        return text, False
    marker = limits.truncation_marker
    return text[: max(0, max_chars - len(marker))] + marker, True


def one_line(text: str) -> str:
    return " ".join(text.split())
