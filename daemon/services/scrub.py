"""Secret scrubbing and size capping for cross-project mail.

Mail crosses a project boundary, so credentials must not ride along.
:func:`scrub` replaces anything that looks like a secret with
``[REDACTED:<kind>]`` and counts the replacements; :func:`cap` then bounds
the text and appends a visible marker when it cut something. Scrubbing runs
before capping so a secret cut in half by the cap cannot survive as a
fragment.

What is caught, in order (earlier kinds win, so a provider key inside an
assignment is counted once):

* PEM blocks (``-----BEGIN …-----`` to the matching END, or the end of text);
* provider keys: AWS access keys, GitHub, GitLab, Slack, npm, Hugging Face,
  Google API keys, ``sk-``/``pk-``/``rk-`` and Stripe-style ``sk_live_`` keys;
* JWTs (three base64url parts starting ``eyJ``);
* bearer tokens (``Bearer <token>``, also after ``Authorization:``);
* credentials in URLs (``scheme://user:password@``);
* assignments whose name is or ends in a secret-ish word -- ``token=``,
  ``GITHUB_TOKEN=``, ``CLIENT_SECRET:``, ``db_password =``, ``"api_key": …``
  and the generic KEY | TOKEN | SECRET | PASSWORD | CREDENTIAL | PRIVATE_KEY
  catch-all. The name stays, the value goes. Words are matched whole (or
  joined to others by ``_``, ``-`` or ``.``), so ``monkey=`` is left alone.
"""

from __future__ import annotations

import re

from common import limits

_SECRET_WORD = (r"(?:private[_\-.]?key|api[_\-.]?key|access[_\-.]?key|key|token|secret|"
                r"passw(?:or)?d|pwd|credentials?)")
_NAME = rf"(?:[A-Za-z0-9]+[_\-.])*{_SECRET_WORD}(?:[_\-.][A-Za-z0-9]+)*"
_VALUE = r"(?!\[REDACTED)(?:\"[^\"\n]{3,}\"|'[^'\n]{3,}'|[^\s,;&\"'<>]{3,})"

# (kind, pattern, what replaces a match, literals, lowercase words): a text
# that holds none of a kind's literals, or whose lowercase form holds none of
# its words, cannot match it, so that scan is skipped. The words of the
# case-insensitive kinds are only checked on ASCII text: elsewhere Unicode
# case folding lets other characters match their letters (the long s, the
# dotless i, the Kelvin sign), and those kinds are always scanned.
_Kind = tuple[str, re.Pattern[str], str, tuple[str, ...], tuple[str, ...]]
_PATTERNS: list[_Kind] = [
    ("pem", re.compile(
        r"-----BEGIN ([A-Z0-9 ]+)-----.*?(?:-----END \1-----|\Z)", re.S),
     "[REDACTED:pem]", ("-----BEGIN ",), ()),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
     "[REDACTED:aws_access_key]", ("AKIA", "ASIA"), ()),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b"),
     "[REDACTED:github_token]", ("gh", "github_pat_"), ()),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}\b"), "[REDACTED:gitlab_token]", ("glpat-",), ()),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"), "[REDACTED:slack_token]", ("xox",), ()),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), "[REDACTED:npm_token]", ("npm_",), ()),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "[REDACTED:huggingface_token]",
     ("hf_",), ()),
    ("api_key", re.compile(
        r"\b(?:sk|pk|rk)[-_](?:live[-_]|test[-_]|proj-|ant-)?[A-Za-z0-9_\-]{20,}\b"),
     "[REDACTED:api_key]", ("sk-", "sk_", "pk-", "pk_", "rk-", "rk_"), ()),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), "[REDACTED:google_api_key]",
     ("AIza",), ()),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\b"),
     "[REDACTED:jwt]", ("eyJ",), ()),
    ("bearer", re.compile(r"(?i)\b(bearer)\s+(?!\[REDACTED)[A-Za-z0-9_\-.=~+/]{16,}"),
     r"\1 [REDACTED:bearer]", (), ("bearer",)),
    ("url_credentials", re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]+):[^@\s/]+@"),
     r"\1:[REDACTED:url_credentials]@", ("://",), ()),
    ("assignment", re.compile(
        rf"(?i)(?<![A-Za-z0-9])((?:\"{_NAME}\"|'{_NAME}'|{_NAME})\s*[:=]\s*){_VALUE}"),
     r"\1[REDACTED:assignment]", (":", "="), ("key", "token", "secret", "passw", "pwd", "credential")),
]


def _holds(text: str, parts: tuple[str, ...]) -> bool:
    for part in parts:
        if part in text:
            return True
    return False


def scrub(text: str) -> tuple[str, int]:
    """``text`` with every secret replaced, and how many were. A scan that
    cannot match is skipped (see ``_PATTERNS``); :func:`scrub_every_scan`
    runs them all, with the same result."""
    count = 0
    lower = text.lower() if text.isascii() else None
    for _kind, pattern, replacement, literals, words in _PATTERNS:
        if literals and not _holds(text, literals):
            continue
        if words and lower is not None and not _holds(lower, words):
            continue
        text, n = pattern.subn(replacement, text)
        if n:
            count += n
            lower = text.lower() if lower is not None else None  # replacements are ASCII
    return text, count


def scrub_every_scan(text: str) -> tuple[str, int]:
    """:func:`scrub` without skipping any scan: the reference it is tested against."""
    count = 0
    for _kind, pattern, replacement, _literals, _words in _PATTERNS:
        text, n = pattern.subn(replacement, text)
        count += n
    return text, count


def cap(text: str, max_chars: int, *, marker: str = limits.truncation_marker) -> tuple[str, bool]:
    """Bound ``text`` to ``max_chars`` including ``marker``; True when it cut."""
    if len(text) <= max_chars:
        return text, False
    return text[: max(0, max_chars - len(marker))] + marker, True


def cap_line(text: str, max_chars: int) -> tuple[str, bool]:
    """:func:`cap` for one-line fields: the marker adds no line break."""
    return cap(text, max_chars, marker=limits.truncation_marker_inline)


def one_line(text: str) -> str:
    return " ".join(text.split())
