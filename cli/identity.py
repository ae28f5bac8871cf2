"""``ai-memory user|key|grant|revoke``: administering users, API keys and grants.

Every command talks to any node with a root key (``--key`` /
``AI_MEMORY_KEY``; on loopback a node in anonymous mode needs none), except
``user add NAME --root --db PATH``, which bootstraps the first root user and
key straight into a database file before any node runs
(:mod:`daemon.identity.bootstrap`), and ``key generate``, which only prints
a fresh secret (for ``AI_MEMORY_ROOT_KEY``). A key's secret is printed once,
when it is created; nothing can show it again.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from cli.output import print_json, table
from cli.state import CliState, pass_state
from common.errors import BadRequest, Conflict


@click.group()
def user() -> None:
    """Add, list and remove users; set a user's password."""


@user.command("add")
@click.argument("name")
@click.option("--root", is_flag=True, help="A root user: administers, needs no grants.")
@click.option("--db", "db", type=click.Path(dir_okay=False),
              help="Bootstrap: write the user and a new root key into this database file "
                   "(no node may be running on it).")
@click.option("--node-id", envvar="AI_MEMORY_NODE_ID",
              help="With --db: the id of the node that serves that file (as for serve).")
@click.option("--config", type=click.Path(exists=True, dir_okay=False),
              help="With --db: the node's TOML file (for its node id).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON reply.")
@pass_state
def add_user(state: CliState, name: str, root: bool, db: str | None, node_id: str | None,
             config: str | None, as_json: bool) -> None:
    """Add user NAME."""
    if db is not None:
        if not root:
            raise BadRequest("--db bootstraps a root user: pass --root")
        _refuse_if_served(db)
        out = asyncio.run(_bootstrap(db, name, node_id, config))
        if as_json:
            print_json(out)
        else:
            click.echo(out["key"])
            click.echo(f"root user {name} and key {out['id']} written to {db} as ops of node "
                       f"{out['node_id']}; the key is shown only now", err=True)
        return
    reply = state.client().post("/api/v1/admin/users", {"name": name, "root": root})
    if as_json:
        print_json(reply)
    else:
        click.echo(f"added user {name}" + (" (root)" if root else ""))


def _refuse_if_served(db: str) -> None:
    import os

    from store.schema import in_use

    if os.path.exists(db) and in_use(db):
        raise Conflict(f"{db} is open in another process (a running node?); with the cluster "
                       "running, add users through its API with a root key instead")


async def _bootstrap(db: str, name: str, node_id: str | None, config: str | None) -> dict[str, Any]:
    from daemon.identity.bootstrap import add_root_offline
    from daemon.settings import load_settings
    from store.db import Store

    settings = load_settings({"db": db, "node_id": node_id, "config": config})
    nid = settings.cluster.node_id
    store = await Store.open(db, nid)
    try:
        out = await add_root_offline(store, nid, name)
    finally:
        if store.created:  # no node has served it yet: the first node's open is its creation
            await store.mark_created_offline()
        await store.close()
    return {**out, "node_id": nid}


@user.command("list")
@click.option("--all", "include_removed", is_flag=True, help="Include removed users.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def list_users(state: CliState, include_removed: bool, as_json: bool) -> None:
    """Show the users."""
    reply = state.client().get("/api/v1/admin/users", all=include_removed or None)
    if as_json:
        print_json(reply)
        return
    click.echo(table(reply.get("users", []), [
        ("name", "USER"), ("root", "ROOT"), ("has_password", "PASSWORD"),
        ("removed", "REMOVED"), ("created_at", "CREATED")]))


@user.command("remove")
@click.argument("name")
@pass_state
def remove_user(state: CliState, name: str) -> None:
    """Remove user NAME: its keys stop working on every node."""
    reply = state.client().delete(f"/api/v1/admin/users/{name}")
    click.echo(f"removed user {name}; revoked {len(reply.get('keys_revoked', []))} key(s)")


@user.command("passwd")
@click.argument("name")
@click.option("--stdin", "from_stdin", is_flag=True, help="Read the password from stdin.")
@pass_state
def passwd(state: CliState, name: str, from_stdin: bool) -> None:
    """Set NAME's password (for the web inbox)."""
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    state.client().post(f"/api/v1/admin/users/{name}/password", {"password": password})
    click.echo(f"password of {name} set")


@click.group()
def key() -> None:
    """Create, list and revoke API keys."""


@key.command("create")
@click.option("--user", "user_name", required=True, help="The key's user.")
@click.option("--agent", help="Bind the key to this agent id (it then fixes X-Agent-Id).")
@click.option("--label", help="A note to recognise the key by.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def create_key(state: CliState, user_name: str, agent: str | None, label: str | None,
               as_json: bool) -> None:
    """Create a key; the key is printed once, with its id."""
    body = {"user": user_name, "agent": agent, "label": label}
    reply = state.client().post("/api/v1/admin/keys", {k: v for k, v in body.items() if v})
    if as_json:
        print_json(reply)
        return
    click.echo(reply["key"])
    click.echo(f"id {reply['id']} (user {user_name}); the key is shown only now", err=True)


@key.command("list")
@click.option("--user", "user_name", help="Only this user's keys.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")
@pass_state
def list_keys(state: CliState, user_name: str | None, as_json: bool) -> None:
    """Show the keys (never their secrets)."""
    reply = state.client().get("/api/v1/admin/keys", user=user_name)
    if as_json:
        print_json(reply)
        return
    click.echo(table(reply.get("keys", []), [
        ("id", "ID"), ("user", "USER"), ("agent", "AGENT"), ("label", "LABEL"),
        ("created_at", "CREATED"), ("last_used_at", "LAST USED (this node)"),
        ("revoked", "REVOKED")]))


@key.command("revoke")
@click.argument("key_id")
@pass_state
def revoke_key(state: CliState, key_id: str) -> None:
    """Revoke key KEY_ID on every node."""
    state.client().delete(f"/api/v1/admin/keys/{key_id}")
    click.echo(f"revoked {key_id}")


@key.command("generate")
def generate() -> None:
    """Print a new random key secret (for AI_MEMORY_ROOT_KEY); stores nothing."""
    from daemon.identity.secrets import new_secret

    click.echo(new_secret())


def _grant_options(fn: Any) -> Any:
    fn = click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON reply.")(fn)
    fn = click.option("--write", "access", flag_value="write", help="Write (implies read).")(fn)
    fn = click.option("--read", "access", flag_value="read", help="Read.")(fn)
    fn = click.option("--project", help="One project; omitted: every project of W.")(fn)
    fn = click.option("--workspace", required=True, help="The workspace W.")(fn)
    fn = click.option("--user", "user_name", required=True, help="The user.")(fn)
    return pass_state(fn)


@click.command("grant")
@_grant_options
def grant(state: CliState, user_name: str, workspace: str, project: str | None,
          access: str | None, as_json: bool) -> None:
    """Grant a user read or write on a project (or a whole workspace)."""
    if access is None:
        raise BadRequest("pass --read or --write")
    body = {"user": user_name, "workspace": workspace, "project": project, "access": access}
    reply = state.client().post("/api/v1/admin/grants", {k: v for k, v in body.items() if v})
    if as_json:
        print_json(reply)
        return
    click.echo(f"granted {access} on {workspace}/{project or '*'} to {user_name}")


@click.command("revoke")
@_grant_options
def revoke(state: CliState, user_name: str, workspace: str, project: str | None,
           access: str | None, as_json: bool) -> None:
    """Take read or write away (revoking write leaves read)."""
    if access is None:
        raise BadRequest("pass --read or --write")
    reply = state.client().delete_with(
        "/api/v1/admin/grants", user=user_name, workspace=workspace, project=project,
        access=access)
    if as_json:
        print_json(reply)
        return
    left = reply.get("access")
    click.echo(f"{user_name} on {workspace}/{project or '*'}: "
               + (f"now {left}" if left else "no access") + ("" if reply.get("changed")
                                                             else " (unchanged)"))


def mode_words(who: dict[str, Any]) -> str:
    """The node's mode, and what it means for this caller. ``mode`` is how
    the caller was identified (a key is resolved on an anonymous node too);
    ``node_mode`` (absent from older nodes) is the mode the node runs in."""
    node_mode = who.get("node_mode")
    if node_mode is None:
        return f", {who.get('mode')} mode"
    if node_mode != "anonymous":
        return f"; the node runs in {node_mode} mode"
    if who.get("mode") == "anonymous":
        return ("; the node runs in anonymous mode: no key, X-Agent-Id names the agent "
                "and every project is open")
    return "; the node runs in anonymous mode, but a key is still checked: its grants apply"


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the JSON reply.")
@pass_state
def whoami(state: CliState, as_json: bool) -> None:
    """Who a node takes this caller for (the key's user, root, bound agent, grants)."""
    who = state.client().get("/api/v1/whoami")
    if as_json:
        print_json(who)
        return
    user = who.get("user") or "(anonymous)"
    agent = who.get("agent")
    click.echo(f"{user}" + (" (root)" if who.get("root") else "")
               + (f", agent {agent}" + (" (bound to the key)" if who.get("agent_bound") else "")
                  if agent else "")
               + (f", key {who['key_id']}" if who.get("key_id") else "") + mode_words(who))
    for g in who.get("grants") or []:
        click.echo(f"  {g.get('access')} on {g.get('workspace')}/{g.get('project') or '*'}")
