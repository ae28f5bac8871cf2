"""Scope resolution: flags, then environment, then the nearest .ai-memory.toml with [project]."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.scope import Scope, resolve_scope
from common.errors import BadRequest


def write_toml(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".ai-memory.toml"
    path.write_text(text)
    return path


def test_nothing_named_means_no_scope(tmp_path: Path) -> None:
    assert resolve_scope(env={}, cwd=tmp_path) is None


def test_flags_win_over_env_and_file(tmp_path: Path) -> None:
    write_toml(tmp_path, '[project]\nworkspace = "fw"\nname = "fp"\n')
    env = {"AI_MEMORY_WORKSPACE": "ew", "AI_MEMORY_PROJECT": "ep"}
    assert resolve_scope("w", "p", env=env, cwd=tmp_path) == Scope("w", "p", "flags")


def test_env_wins_over_file(tmp_path: Path) -> None:
    write_toml(tmp_path, '[project]\nworkspace = "fw"\nname = "fp"\n')
    env = {"AI_MEMORY_WORKSPACE": "ew", "AI_MEMORY_PROJECT": "ep"}
    assert resolve_scope(env=env, cwd=tmp_path) == Scope("ew", "ep", "env")


def test_fields_resolve_independently(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[project]\nworkspace = "fw"\nname = "fp"\n')
    scope = resolve_scope(project="p", env={}, cwd=tmp_path)
    assert scope == Scope("fw", "p", f"flags+{path}")


def test_nearest_file_in_a_parent_is_found(tmp_path: Path) -> None:
    path = write_toml(tmp_path / "repo", '[project]\nworkspace = "default"\nname = "project-b"\n')
    deep = tmp_path / "repo" / "src" / "pkg"
    deep.mkdir(parents=True)
    assert resolve_scope(env={}, cwd=deep) == Scope("default", "project-b", str(path))


def test_file_without_project_table_is_passed_over(tmp_path: Path) -> None:
    write_toml(tmp_path / "repo", '[project]\nworkspace = "outer"\nname = "repo"\n')
    write_toml(tmp_path / "repo" / "sub", "[briefing]\ninject_on_session_start = true\n")
    assert resolve_scope(env={}, cwd=tmp_path / "repo" / "sub") == Scope(
        "outer", "repo", str(tmp_path / "repo" / ".ai-memory.toml")
    )


def test_half_a_scope_is_refused_with_the_missing_flag_named(tmp_path: Path) -> None:
    with pytest.raises(BadRequest) as caught:
        resolve_scope(
            env={"AI_MEMORY_WORKSPACE": "w"},
            cwd=tmp_path,
            flag_names=("--from-workspace", "--from-project"),
        )
    assert "--from-project" in caught.value.message
    assert caught.value.exit_code == 2


def test_broken_toml_is_reported_with_its_path(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[project\n")
    with pytest.raises(BadRequest) as caught:
        resolve_scope(env={}, cwd=tmp_path)
    assert str(path) in caught.value.message


def test_non_string_name_is_refused(tmp_path: Path) -> None:
    write_toml(tmp_path, '[project]\nworkspace = 3\nname = "p"\n')
    with pytest.raises(BadRequest, match="workspace must be a string"):
        resolve_scope(env={}, cwd=tmp_path)
