"""``ai-memory handoff write|accept``: the single-use note for a project's next session.

``write`` leaves a handoff for the current project (see :mod:`cli.scope`;
a project the daemon would only guess is refused, as for ``message send``).
The next session start takes it: the SessionStart hook (``ai-memory hook
session-start``) fetches ``GET /handoff``, which hands it out once across
the cluster. ``accept`` does the same by hand and prints what a hook would
put before the agent: the handoff, the project brief when the project's
``.ai-memory.toml`` opts in (``[briefing] inject_on_session_start = true``,
or ``--brief``), and the inbox notice. It claims under one request id
(``--request-id`` to repeat an earlier one), retried once after a lost
reply, so a lost answer never loses the handoff.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import click

from cli.body import read_body
from cli.client import ApiClient, create_idempotently, drop_none
from cli.message import scope_fields, scope_options, where
from cli.output import note, print_json
from cli.scope import config_tables, name_the_project, resolve_scope
from cli.state import CliState, pass_state
from common import limits
from common.errors import AiMemoryError, BadRequest


def brief_settings(cwd: Path) -> tuple[bool, int | None]:
    """``[briefing]`` of the nearest ``.ai-memory.toml`` that has the table:
    whether a session start gets the brief, and its byte budget (``budget_bytes``)."""
    for table, path in config_tables(cwd, "briefing"):
        inject = table.get("inject_on_session_start", False)
        budget = table.get("budget_bytes")
        if not isinstance(inject, bool):
            raise BadRequest(f"{path}: [briefing].inject_on_session_start must be true or false")
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)
                                   or not limits.brief_budget_bytes_min <= budget
                                   <= limits.brief_budget_bytes_max):
            raise BadRequest(f"{path}: [briefing].budget_bytes must be a whole number from "
                             f"{limits.brief_budget_bytes_min} to {limits.brief_budget_bytes_max}")
        return inject, budget
    return False, None


def fetch_start(client: ApiClient, *, workspace: str | None, project: str | None,
                harness: str | None, session_id: str | None, brief: bool,
                budget: int | None, request_id: str) -> dict[str, Any]:
    """``GET /handoff`` as a session start asks it: claim the handoff, the brief if
    asked, the notice."""
    headers = {"x-memory-actor-session-id": session_id} if session_id else None
    params = drop_none({"workspace": workspace, "project": project, "harness": harness,
                        "brief": "1" if brief else None, "brief_budget": budget,
                        "request_id": request_id})
    reply = client.retrying_once(lambda: client.request("GET", "/handoff", params=params,
                                                        headers=headers))
    if not isinstance(reply, dict):
        raise BadRequest("the node's /handoff answer is not a JSON object")
    return reply


@click.group()
def handoff() -> None:
    """Leave a note for the next session of this project, or take the pending one."""


@handoff.command("write")
@click.argument("body", required=False)
@scope_options
@click.option("--subject", help=f"One line, at most {limits.message_subject_max_chars} characters.")
@click.option("--from-agent", help="Your harness (e.g. codex), when no session names one.")
@click.option("--idempotency-key", help="Reuse the key of an earlier attempt so a retry "
              "stores it once.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def write(state: CliState, body: str | None, workspace: str | None, project: str | None,
          subject: str | None, from_agent: str | None, idempotency_key: str | None,
          as_json: bool) -> None:
    """Leave BODY (or stdin) for the next session of the current project.

    A newer handoff replaces one still pending; the next session start takes it once."""
    scope = resolve_scope(workspace, project)
    request = drop_none({**scope_fields(scope), "subject": subject, "from_agent": from_agent,
                         "body": read_body(body, "handoff")})
    try:
        reply = create_idempotently(state.client(), "/api/v1/handoff", request, idempotency_key)
    except AiMemoryError as exc:
        plain = name_the_project(exc, "stored")
        if plain is exc:
            raise
        raise plain from None
    if as_json:
        print_json(reply)
        return
    replaced = int(reply.get("replaced") or 0)
    click.echo(f"handoff {reply.get('handoff_id')} left for the next session of "
               f"{where(reply.get('workspace'), reply.get('project'))}"
               + (f" (replaces {replaced} pending)" if replaced else ""))
    truncated = [k for k, v in (reply.get("truncated") or {}).items() if v]
    if truncated:
        note(f"warning: the daemon truncated the {' and '.join(truncated)} to its size limit")
    if reply.get("scrubbed"):
        note(f"warning: the daemon scrubbed {reply['scrubbed']} secret(s) from the handoff")


@handoff.command("accept")
@scope_options
@click.option("--harness", help="Your harness (counts the mail addressed to it in the notice).")
@click.option("--brief/--no-brief", default=None,
              help="Include the project brief (default: [briefing] inject_on_session_start).")
@click.option("--request-id", help="Repeat an earlier accept's id to get the same handoff.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def accept(state: CliState, workspace: str | None, project: str | None, harness: str | None,
           brief: bool | None, request_id: str | None, as_json: bool) -> None:
    """Take the pending handoff of the current project (once) and print the on-start block."""
    scope = resolve_scope(workspace, project)
    inject, budget = brief_settings(Path.cwd())
    rid = request_id or f"accept-{uuid.uuid4()}"
    reply = fetch_start(state.client(), workspace=scope.workspace if scope else None,
                        project=scope.project if scope else None, harness=harness,
                        session_id=None, brief=inject if brief is None else brief,
                        budget=budget, request_id=rid)
    if as_json:
        print_json(reply)
        return
    if reply.get("handoff_hint"):
        note(str(reply["handoff_hint"]))
    if reply.get("handoff") is None:
        note(f"no pending handoff for {where(reply.get('workspace'), reply.get('project'))}")
    if reply.get("context"):
        click.echo(str(reply["context"]).rstrip("\n"))
