"""Which project the CLI speaks for: the sender scope of a send, the reader scope of list/pop/cancel.

Each of workspace and project is taken from the strongest source that names
it: command-line flags, then ``AI_MEMORY_WORKSPACE`` / ``AI_MEMORY_PROJECT``,
then the nearest ``.ai-memory.toml`` in the working directory or a parent::

    [project]
    workspace = "default"
    name = "project-b"

A file without a ``[project]`` table is passed over, so a repository can keep
other settings there. If no source names either field the CLI sends no scope
at all and lets the daemon decide; the daemon refuses a guessed scope for
send, pop and cancel, and :func:`name_the_project` turns that refusal into
plain words: which flags, variables or file name the project. Naming only
one of the two is a usage error, because half a scope would be completed by
the daemon's guess.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import AiMemoryError, BadRequest, Conflict

CONFIG_FILE = ".ai-memory.toml"
ENV_WORKSPACE = "AI_MEMORY_WORKSPACE"
ENV_PROJECT = "AI_MEMORY_PROJECT"


@dataclass(frozen=True, slots=True)
class Scope:
    workspace: str
    project: str
    source: str  # where the values came from, for messages: "flags", "env", a file path


@dataclass(frozen=True, slots=True)
class _FileScope:
    workspace: str | None
    project: str | None
    path: Path


def config_tables(start: Path, name: str) -> Iterator[tuple[dict[str, Any], Path]]:
    """The ``[name]`` table of each ``.ai-memory.toml`` from ``start`` upwards, nearest
    first, with its file; a file without that table is passed over, one that cannot
    be read is a 400. Files further up are read only when asked for."""
    for directory in (start, *start.parents):
        candidate = directory / CONFIG_FILE
        if not candidate.is_file():
            continue
        try:
            with candidate.open("rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise BadRequest(f"cannot read {candidate}: {exc}") from exc
        table = data.get(name)
        if isinstance(table, dict):
            yield table, candidate


def find_project_file(start: Path) -> _FileScope | None:
    """Nearest ``.ai-memory.toml`` with a ``[project]`` table, from ``start`` upwards."""
    for table, candidate in config_tables(start, "project"):
        workspace = table.get("workspace")
        name = table.get("name")
        if workspace is not None and not isinstance(workspace, str):
            raise BadRequest(f"{candidate}: [project].workspace must be a string")
        if name is not None and not isinstance(name, str):
            raise BadRequest(f"{candidate}: [project].name must be a string")
        if workspace or name:
            return _FileScope(workspace or None, name or None, candidate)
    return None


def resolve_scope(
    workspace: str | None = None,
    project: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    flag_names: tuple[str, str] = ("--workspace", "--project"),
) -> Scope | None:
    """Resolve the caller's project; ``None`` when nothing names one."""
    env = os.environ if env is None else env
    sources: list[str] = []
    if workspace or project:
        sources.append("flags")
    env_ws = env.get(ENV_WORKSPACE) or None
    env_proj = env.get(ENV_PROJECT) or None
    if not workspace and env_ws:
        workspace = env_ws
        sources.append("env")
    if not project and env_proj:
        project = env_proj
        sources.append("env")
    if not (workspace and project):
        found = find_project_file(cwd or Path.cwd())
        if found is not None:
            if not workspace and found.workspace:
                workspace = found.workspace
                sources.append(str(found.path))
            if not project and found.project:
                project = found.project
                sources.append(str(found.path))
    if not workspace and not project:
        return None
    if not workspace or not project:
        missing = flag_names[0] if not workspace else flag_names[1]
        env_name = ENV_WORKSPACE if not workspace else ENV_PROJECT
        raise BadRequest(
            f"only half a project scope was given ({', '.join(dict.fromkeys(sources))}); "
            f"also pass {missing}, set {env_name}, or name both in {CONFIG_FILE} [project]"
        )
    return Scope(workspace, project, "+".join(dict.fromkeys(sources)))


def how_to_name(flag_names: tuple[str, str] = ("--workspace", "--project")) -> str:
    """The three ways to name a project, in words, for an error or a hint."""
    ws, proj = flag_names
    return (f"pass {ws} and {proj} (for example `{ws} default {proj} project-b`), or set "
            f"{ENV_WORKSPACE} and {ENV_PROJECT}, or put a [project] table "
            f'(workspace = "...", name = "...") in {CONFIG_FILE} in this directory or a parent')


def name_the_project(exc: AiMemoryError, what: str,
                     flag_names: tuple[str, str] = ("--workspace", "--project")) -> AiMemoryError:
    """The daemon's refusal of a guessed scope (409 with ``scope_source``), in plain words.

    The daemon writes that refusal for MCP agents ("resolved by shared_slot,
    not named"); at a terminal the user needs to know what to pass. Any other
    error comes back unchanged. ``what`` is what was refused ("popped").
    """
    if not isinstance(exc, Conflict) or "scope_source" not in exc.details:
        return exc
    details: dict[str, object] = {}
    guessed = exc.details.get("resolved_scope")
    if isinstance(guessed, dict) and guessed.get("workspace") and guessed.get("project"):
        details["the node would have guessed"] = (
            f"{guessed['workspace']}/{guessed['project']} ({exc.details['scope_source']})")
    plain = Conflict(f"no project was named, so nothing was {what}: {how_to_name(flag_names)}",
                     **details)
    plain.code = exc.code
    return plain
