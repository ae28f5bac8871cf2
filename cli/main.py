"""The ``ai-memory`` command: one click group, one place where errors become exit codes.

Global options say where the daemon is and who is asking: ``--url``
(``AI_MEMORY_URL``, default http://127.0.0.1:9077), ``--agent-id``
(``AI_MEMORY_AGENT_ID``, sent as ``X-Agent-Id``) and ``--api-key``
(``AI_MEMORY_API_KEY``, sent as ``X-API-Key``) and ``--key``
(``AI_MEMORY_KEY``, a directory key sent as ``Authorization: Bearer``;
given both, only ``--key`` is sent, see :mod:`common.clients`),
and for an https daemon ``--ca-cert`` (``AI_MEMORY_CA_CERT``, the cluster
CA its certificate is verified against, see :mod:`common.trust`).

Any :class:`common.errors.AiMemoryError` raised by a command is printed on
stderr and ends the process with its ``exit_code``: 2 client error, 3 not
found, 4 conflict, 5 limit, 6 server or unavailable, 7 cannot connect.

``serve`` lives in :mod:`cli.serve` and pulls in the whole daemon, so it is
imported only when asked for; every other command talks HTTP and starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from cli.agents import agents
from cli.approvals import approvals
from cli.backup import backup, restore
from cli.client import DEFAULT_URL, normalize_url
from cli.cluster import cluster
from cli.handoff import handoff
from cli.health import health
from cli.identity import grant, key, revoke, user, whoami
from cli.inbox import inbox
from cli.memories import memories
from cli.message import message
from cli.notify import notify
from cli.output import print_error
from cli.purge import project, workspace
from cli.session import session
from cli.state import CliState
from cli.subscription import subscription
from common import __version__, trust
from common.errors import AiMemoryError

LAZY_COMMANDS = {"serve": ("cli.serve", "serve"), "mcp": ("cli.mcp_cmd", "mcp"),
                 "mcp-bridge": ("cli.mcp_cmd", "mcp_bridge"), "hook": ("cli.hooks", "hook"),
                 "install-hooks": ("cli.install_hooks", "install_hooks"), "skill": ("cli.skill", "skill"),
                 "tls": ("cli.tls_cmd", "tls"), "listen": ("cli.listen", "listen"),
                 "lanes": ("cli.lanes_cmd", "lanes")}


class RootGroup(click.Group):
    """Adds lazily imported commands and turns AiMemoryError into exit codes."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            module_name, attr = LAZY_COMMANDS[cmd_name]
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name != module_name:
                    raise
                return None
            command = getattr(module, attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AiMemoryError as exc:
            print_error(exc)
            ctx.exit(exc.exit_code)


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "-V", "--version", prog_name="ai-memory", message="%(prog)s %(version)s"
)
@click.option(
    "--url",
    envvar="AI_MEMORY_URL",
    default=DEFAULT_URL,
    show_default=True,
    show_envvar=True,
    help="The daemon's address (http://HOST:PORT; a bare HOST:PORT is taken as http).",
)
@click.option(
    "--agent-id",
    envvar="AI_MEMORY_AGENT_ID",
    show_envvar=True,
    help="Who you are; sent as X-Agent-Id.",
)
@click.option(
    "--api-key",
    envvar="AI_MEMORY_API_KEY",
    show_envvar=True,
    help="Sent as X-API-Key when the daemon requires keys (not sent when --key is given).",
)
@click.option(
    "--key",
    envvar="AI_MEMORY_KEY",
    show_envvar=True,
    help="An API key (aim_...), sent as Authorization: Bearer; takes the place of --api-key.",
)
@click.option(
    "--ca-cert",
    envvar="AI_MEMORY_CA_CERT",
    show_envvar=True,
    help="CA file (PEM; comma separated for several) that an https daemon's certificate "
         "is verified against: the cluster's ca.crt from `cluster init`.",
)
@click.pass_context
def cli(ctx: click.Context, url: str, agent_id: str | None, api_key: str | None,
        key: str | None, ca_cert: str | None) -> None:
    """ai-memory: notify agents, exchange claim-once project mail, run a cluster."""
    trust.default_ca = ca_cert or None  # for clients built without the state
    ctx.obj = CliState(url=normalize_url(url), agent_id=agent_id or None, api_key=api_key or None,
                       key=key or None, ca_cert=ca_cert or None)


for _command in (notify, inbox, agents, session, message, handoff, memories, health, cluster,
                 backup, restore, user, key, grant, revoke, whoami, project, workspace, approvals):
    cli.add_command(_command)
cli.add_command(subscription)


def main() -> None:
    cli(prog_name="ai-memory")


if __name__ == "__main__":
    main()
