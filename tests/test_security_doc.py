"""docs/security.md's policy table is common/policy.py's, row by row."""

from __future__ import annotations

import re
from pathlib import Path

from common import policy

DOC = Path(__file__).resolve().parents[1] / "docs" / "security.md"


def needs(action: str) -> str:
    """What the table's second column says for ``action``."""
    if action in policy.ROOT_ONLY:
        return "root"
    if action in policy.AUTHOR_ONLY:
        return "the author's bound key, or root"
    if action in policy.WORKSPACE_WIDE:
        return f"{policy.WORKSPACE_WIDE[action]} on all of box's workspace, or root"
    return ", ".join(f"{access} on {role}" for role, access in policy.ACTIONS[action])


def documented() -> dict[str, str]:
    text = DOC.read_text()
    table = text.split("<!-- policy-table:start -->")[1].split("<!-- policy-table:end -->")[0]
    rows: dict[str, str] = {}
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([a-z_.]+)`", cells[0])
        assert match, line
        assert match.group(1) not in rows, f"{match.group(1)} twice"
        rows[match.group(1)] = cells[1]
    return rows


def test_the_documented_table_is_the_policy_table() -> None:
    every = {*policy.ACTIONS, *policy.ROOT_ONLY, *policy.AUTHOR_ONLY, *policy.WORKSPACE_WIDE}
    rows = documented()
    expected = {action: needs(action) for action in every}
    assert rows == expected, "docs/security.md should list:\n" + "\n".join(
        f"| `{a}` | {n} | ... |" for a, n in sorted(expected.items()))


def test_the_three_kinds_of_rule_do_not_overlap() -> None:
    assert not set(policy.ACTIONS) & policy.ROOT_ONLY
    assert not set(policy.ACTIONS) & policy.AUTHOR_ONLY
    assert not policy.ROOT_ONLY & policy.AUTHOR_ONLY
    wide = set(policy.WORKSPACE_WIDE)
    assert not wide & (set(policy.ACTIONS) | policy.ROOT_ONLY | policy.AUTHOR_ONLY)
