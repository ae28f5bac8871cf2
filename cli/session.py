"""``ai-memory session start``: record that a session began in a project.

Meant for harness hooks (SessionStart). A project exists for the daemon only
once a session has started in it, and mail can only be sent to a project
that exists, so a hook that runs this makes the project reachable. The
session id defaults to a new UUID, printed so the hook can keep it.
"""

from __future__ import annotations

import uuid

import click

from cli.client import drop_none
from cli.output import print_json
from cli.scope import resolve_scope
from cli.state import CliState, pass_state


@click.group()
def session() -> None:
    """Record agent sessions (for harness hooks)."""


@session.command("start")
@click.option("--workspace", help="Workspace of the project (else env or .ai-memory.toml).")
@click.option("--project", help="Project name (else env or .ai-memory.toml).")
@click.option("--harness", required=True, help="Which harness runs the session, e.g. claude-code.")
@click.option("--session-id", help="The harness's session id (default: a new UUID).")
@click.option("--owner-user", help="Operator the session belongs to, on a multi-user server.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def start(
    state: CliState,
    workspace: str | None,
    project: str | None,
    harness: str,
    session_id: str | None,
    owner_user: str | None,
    as_json: bool,
) -> None:
    """Start (or re-announce) a session in the current project."""
    scope = resolve_scope(workspace, project)
    if scope is None:
        raise click.UsageError(
            "which project? pass --workspace and --project, set AI_MEMORY_WORKSPACE and "
            "AI_MEMORY_PROJECT, or add [project] to .ai-memory.toml"
        )
    body = drop_none(
        {
            "workspace": scope.workspace,
            "project": scope.project,
            "harness": harness,
            "session_id": session_id or str(uuid.uuid4()),
            "owner_user": owner_user,
        }
    )
    reply = state.client().post("/api/v1/sessions", body)
    if as_json:
        print_json(reply)
        return
    verb = "started" if reply.get("created", True) else "resumed"
    click.echo(
        f"{verb} session {reply.get('session_id', body['session_id'])} "
        f"({reply.get('harness', harness)}) in {reply.get('workspace')}/{reply.get('project')}"
    )
