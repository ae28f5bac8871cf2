"""The scrubber, kind by kind: what the project-messaging document says must
not cross a project boundary, and prose that must survive untouched."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import limits
from daemon.services import scrub

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234\nabcd\n"
       "-----END RSA PRIVATE KEY-----")

CASES = [
    ("token=abc123def456", "abc123def456", "assignment"),
    ("see ?token=abcdef123456&x=1", "abcdef123456", "assignment"),
    ("GITHUB_TOKEN=zzzzzzzzzz", "zzzzzzzzzz", "assignment"),
    ("export SLACK_BOT_TOKEN='xyzxyzxyzxyz'", "xyzxyzxyzxyz", "assignment"),
    ("CLIENT_SECRET: s3cr3tvalue", "s3cr3tvalue", "assignment"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG", "wJalrXUtnFEMIK7MDENG", "assignment"),
    ("db_password = hunter2hunter2", "hunter2hunter2", "assignment"),
    ('{"api_key": "kkkkkkkkkkkk"}', "kkkkkkkkkkkk", "assignment"),
    ("MY_CREDENTIAL=cccccccccc", "cccccccccc", "assignment"),
    ("PRIVATE_KEY=pppppppppp", "pppppppppp", "assignment"),
    ("SECRET=ssssssss", "ssssssss", "assignment"),
    ("Authorization: Bearer abcdefghijklmnopqrstuv", "abcdefghijklmnopqrstuv", "bearer"),
    ("AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP", "aws_access_key"),
    ("ghp_" + "a" * 36, "ghp_" + "a" * 36, "github_token"),
    ("sk-ant-" + "b" * 30, "b" * 30, "api_key"),
    ("sk_live_" + "c" * 24, "c" * 24, "api_key"),
    ("xoxb-1234567890-abcdef", "xoxb-1234567890-abcdef", "slack_token"),
    ("AIza" + "d" * 35, "d" * 35, "google_api_key"),
    ("glpat-" + "e" * 20, "e" * 20, "gitlab_token"),
    (f"jwt {JWT}", JWT, "jwt"),
    (PEM, "MIIEpAIBAAKCAQEA1234", "pem"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk", "b3BlbnNzaC1rZXk", "pem"),
    ("postgres://admin:pa55word@db:5432/x", "pa55word", "url_credentials"),
]


@pytest.mark.parametrize(("text", "secret", "kind"), CASES)
def test_secret_is_redacted(text: str, secret: str, kind: str) -> None:
    out, n = scrub.scrub(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out
    assert n == 1


def test_provider_key_in_assignment_counted_once() -> None:
    out, n = scrub.scrub("GITHUB_TOKEN=ghp_" + "a" * 36)
    assert out == "GITHUB_TOKEN=[REDACTED:github_token]" and n == 1


@pytest.mark.parametrize("text", [
    "the monkey=banana test", "tokenizer settings", "keyboard: us", "see file:line 42",
    "password reset flow is broken", "pass the key to the next step",
])
def test_prose_is_left_alone(text: str) -> None:
    assert scrub.scrub(text) == (text, 0)


def test_cap_line_keeps_one_line() -> None:
    out, cut = scrub.cap_line("x" * 300, 200)
    assert cut and len(out) == 200 and "\n" not in out
    assert out.endswith(limits.truncation_marker_inline)
    assert scrub.cap_line("short", 200) == ("short", False)


# Pieces of text that start, end or fake a secret of every kind, in every
# case, and the characters that Unicode case folding lets match an ASCII
# letter (the long s, the dotless and the dotted capital i, the Kelvin sign).
_PIECES = [
    "token", "TOKEN", "Token", "tOkEn", "key", "KEY", "api_key", "API-KEY", "access.key", "private_key",
    "secret", "SECRET", "passwd", "password", "PassWord", "pwd", "credential", "credentials", "monkey",
    "bearer", "Bearer", "BEARER", "Authorization:", "=", ":", " = ", ": ", "\"", "'", " ", "\n", "\t", ",",
    "abcdef123456", "hunter2hunter2", "abcdefghijklmnopqrstuv", "x" * 20, "é", "ü", "中",
    "\u017f", "\u0131", "\u0130", "\u212a", "\u017fecret", "cred\u0131ential", "\u212aey", "TO\u212aEN",
    "AKIA", "ABCDEFGHIJKLMNOP", "ghp_", "a" * 36, "github_pat_", "glpat-", "xoxb-", "1234567890-abcdef",
    "npm_", "hf_", "sk-", "sk_live_", "pk_test_", "rk-", "AIza", "d" * 35, "eyJ", "hbGciOiJIUzI1NiJ9", ".",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "postgres://", "admin", "@", "/",
    "[REDACTED", "]",
]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=14))
def test_skipping_scans_that_cannot_match_changes_nothing(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert scrub.scrub(text) == scrub.scrub_every_scan(text)


@pytest.mark.parametrize("text", [
    "\u017fecret=abcdef123456",  # the long s matches s case-insensitively
    "cred\u0131ential: abcdef123456", "CREDENT\u0130AL=abcdef123456", "\u212aEY=abcdef123456",
    "b\u0435arer abcdefghijklmnopqrstuv",  # a Cyrillic e: no match, either way
    "Note: the build failed; see /var/log/x.log", "x" * 200,
])
def test_non_ascii_and_lookalike_text_is_scrubbed_as_by_every_scan(text: str) -> None:
    assert scrub.scrub(text) == scrub.scrub_every_scan(text)
