"""The policy table (common/policy.py): every row allowed and refused."""

from __future__ import annotations

import pytest

from common import policy
from common.errors import Forbidden
from common.policy import Principal, ProjectGrant

A = ("ws", "alpha")
B = ("ws", "beta")
COORDS = {"box": A, "from": A, "to": B}


def keyed(*grants: ProjectGrant, root: bool = False) -> Principal:
    return Principal(mode="keys", user="u", root=root, grants=grants)


@pytest.mark.parametrize("action", sorted(policy.ACTIONS))
def test_every_row_is_refused_without_grants_and_allowed_with_write(action: str) -> None:
    with pytest.raises(Forbidden):
        policy.check(keyed(), action, COORDS)
    everything = keyed(ProjectGrant("ws", None, "write"))
    policy.check(everything, action, COORDS)
    policy.check(keyed(root=True), action, COORDS)
    policy.check(Principal.anonymous("agent-1"), action, COORDS)


@pytest.mark.parametrize("action", sorted(policy.ACTIONS))
def test_read_grants_allow_exactly_the_read_rows(action: str) -> None:
    reader = keyed(ProjectGrant("ws", None, "read"))
    needs_write = any(access == "write" for _, access in policy.ACTIONS[action])
    if needs_write:
        with pytest.raises(Forbidden):
            policy.check(reader, action, COORDS)
    else:
        policy.check(reader, action, COORDS)


def test_send_needs_write_on_both_projects() -> None:
    only_from = keyed(ProjectGrant("ws", "alpha", "write"))
    with pytest.raises(Forbidden) as refused:
        policy.check(only_from, "message.send", COORDS)
    assert refused.value.details == {"workspace": "ws", "project": "beta", "access": "write"}
    both = keyed(ProjectGrant("ws", "alpha", "write"), ProjectGrant("ws", "beta", "write"))
    policy.check(both, "message.send", COORDS)


def test_a_grant_names_its_workspace_and_project() -> None:
    other_ws = keyed(ProjectGrant("other", None, "write"))
    other_project = keyed(ProjectGrant("ws", "gamma", "write"))
    for who in (other_ws, other_project):
        with pytest.raises(Forbidden):
            policy.check(who, "message.pop", {"box": A})


@pytest.mark.parametrize("action", sorted(policy.ROOT_ONLY))
def test_root_only_actions(action: str) -> None:
    with pytest.raises(Forbidden):
        policy.check(keyed(ProjectGrant("ws", None, "write")), action)
    policy.check(keyed(root=True), action)
    policy.check(Principal.anonymous(), action)


def test_an_unknown_action_is_a_programming_error() -> None:
    with pytest.raises(KeyError):
        policy.check(keyed(root=True), "message.teleport", COORDS)


@pytest.mark.parametrize("action", sorted(policy.AUTHOR_ONLY))
def test_author_only_actions(action: str) -> None:
    author = Principal(mode="keys", user="u", agent="bot-1", agent_bound=True)
    policy.check_author(author, "bot-1", action)
    policy.check_author(keyed(root=True), "bot-1", action)
    policy.check_author(Principal.anonymous("someone-else"), "bot-1", action)
    refused = [
        Principal(mode="keys", user="u", agent="bot-2", agent_bound=True),  # another agent
        Principal(mode="keys", user="u", agent="bot-1"),  # unbound: the agent is only named
        keyed(ProjectGrant("ws", None, "write")),  # grants do not make an author
    ]
    for who in refused:
        with pytest.raises(Forbidden):
            policy.check_author(who, "bot-1", action)
    with pytest.raises(Forbidden):
        policy.check_author(author, None, action)  # nobody's record: root only


def test_an_unknown_author_action_is_a_programming_error() -> None:
    with pytest.raises(KeyError):
        policy.check_author(keyed(root=True), "a", "message.pop")


def test_a_project_purge_needs_write_on_the_whole_workspace_or_root() -> None:
    for refused in (keyed(), keyed(ProjectGrant("ws", "alpha", "write")),
                    keyed(ProjectGrant("ws", None, "read")),
                    keyed(ProjectGrant("other", None, "write"))):
        with pytest.raises(Forbidden, match="all of workspace ws"):
            policy.check(refused, "project.purge", {"box": A})
    policy.check(keyed(ProjectGrant("ws", None, "write")), "project.purge", {"box": A})
    policy.check(keyed(root=True), "project.purge", {"box": A})
    policy.check(Principal.anonymous("agent-1"), "project.purge", {"box": A})


def test_a_workspace_purge_is_roots_alone() -> None:
    with pytest.raises(Forbidden, match="root"):
        policy.check(keyed(ProjectGrant("ws", None, "write")), "workspace.purge")
    policy.check(keyed(root=True), "workspace.purge")
