"""``ai-memory cluster up|status|init``: run, inspect and configure a cluster.

``up`` starts real ``ai-memory serve`` processes in the foreground and keeps
them running (see :mod:`cli.supervisor`); ``stop|start|kill NODE`` act on one
node of it (see :mod:`cli.cluster_control`); ``status`` asks every member for its view (see
:mod:`cli.cluster_status`); ``init`` writes one config file per node (see
:mod:`cli.node_config`). ``up`` and ``init`` share :func:`cli.layout.plan_cluster`,
so node ``node{i}`` always listens on ``base_port + i - 1``.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shlex
import socket
import sys
from pathlib import Path

import click

from cli import cluster_status, local_secret
from cli.layout import DbPath, NodeSpec, majority, peer_entries, plan_cluster
from cli.node_config import write_configs
from cli.output import note, print_json, table
from cli.state import CliState, pass_state
from common import limits
from common.errors import BadRequest, ServerError

SECRET_ENV = "AI_MEMORY_CLUSTER_SECRET"
DEFAULT_BASE_PORT = 9077


@click.group()
def cluster() -> None:
    """Run, inspect and configure a cluster of nodes."""


def serve_argv(exe: list[str], spec: NodeSpec, nodes: list[NodeSpec]) -> list[str]:
    """The ``ai-memory serve`` command line of one node of ``nodes``."""
    argv = [
        *exe,
        "serve",
        "--node-id", spec.node_id,
        "--host", spec.host,
        "--port", str(spec.port),
        "--db", str(spec.db),
        "--quorum-writes", str(majority(len(nodes))),
    ]  # fmt: skip
    peers = peer_entries(spec, nodes)
    if peers:
        argv += ["--quorum-peers", ",".join(peers)]
    return argv


@cluster.command("up")
@click.option(
    "--nodes", type=click.IntRange(1), default=3, show_default=True, help="How many nodes."
)
@click.option(
    "--base-port",
    type=int,
    default=DEFAULT_BASE_PORT,
    show_default=True,
    help="Port of node1; node i listens on base + i - 1.",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".data"),
    show_default=True,
    help="Directory of the node databases.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address every node binds.")
@click.option(
    "--secret",
    envvar=SECRET_ENV,
    show_envvar=True,
    help="Shared peer secret (default: the one in DATA/cluster.secret, made on first use).",
)
@click.option("--exe", help="Command that runs ai-memory (default: this Python with -m cli).")
def up(
    nodes: int, base_port: int, data_dir: Path, host: str, secret: str | None, exe: str | None
) -> None:
    """Start a local cluster in the foreground; Ctrl-C stops it."""
    from cli.supervisor import ChildSpec, Supervisor

    specs = plan_cluster(nodes, base_port, (host,), DbPath(data_dir.resolve()))
    busy = ports_in_use(host, [(s.node_id, s.port) for s in specs])
    if busy:
        taken = ", ".join(f"{port} ({node})" for node, port in busy)
        raise BadRequest(
            f"cannot start the cluster: port{'s' if len(busy) > 1 else ''} {taken} on {host} "
            "already in use, maybe by another `cluster up` or `ai-memory serve`",
            hint="stop what listens there, or pick free ports with --base-port "
                 "(node1 on it, node i on base + i - 1); nothing was started")
    data_dir.mkdir(parents=True, exist_ok=True)
    command = shlex.split(exe) if exe else [sys.executable, "-m", "cli"]
    # No flag for a first start: members with no database find out together
    # whether the cluster is new (daemon/replication/joining.py), as on separate hosts.
    children = [ChildSpec(s.node_id, serve_argv(command, s, specs), s.url) for s in specs]
    extra_state: dict[str, str] = {}
    if not secret:  # one secret for the life of this data directory: backups just work
        secret = local_secret.load_or_create(data_dir.resolve())
        extra_state["secret_file"] = str(local_secret.secret_path(data_dir.resolve()))
    env = {**os.environ, SECRET_ENV: secret, "PYTHONUNBUFFERED": "1"}
    if host in ("127.0.0.1", "localhost", "::1"):
        # A local cluster is for trying things out: let it call hooks on this host.
        env.setdefault("AI_MEMORY_ALLOW_LOOPBACK_WEBHOOKS", "1")

    def summary() -> None:
        click.echo(
            table(
                [{"node": s.node_id, "url": s.url, "db": str(s.db)} for s in specs],
                [("node", "NODE"), ("url", "URL"), ("db", "DATABASE")],
            )
        )
        click.echo(
            f"cluster of {nodes} ready, write quorum {majority(nodes)}. Try:\n"
            f"  ai-memory --url {specs[0].url} cluster status\n"
            f"  ai-memory cluster kill|stop|start NODE --data {data_dir}\n"
            "A node that exits is restarted. Ctrl-C stops every node."
        )

    supervisor = Supervisor(specs=children, env=env, out=click.echo, data_dir=data_dir.resolve(),
                            extra_state=extra_state)
    code = asyncio.run(supervisor.run(on_ready=summary))
    raise SystemExit(code)


def ports_in_use(host: str, ports: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The (node, port) pairs something already listens on (a bind test, as the daemon binds)."""
    busy = []
    for node, port in ports:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    busy.append((node, port))
    return busy


_DATA_OPTION = click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".data"),
    show_default=True,
    help="Data directory of the running `cluster up`.",
)


def _control(cmd: str, node: str, data_dir: Path, wait: float | None = None) -> None:
    from cli.cluster_control import request

    if wait is None:
        reply = request(data_dir, cmd, node)
    else:  # the supervisor answers once the node is healthy, or after `wait`
        reply = request(data_dir, cmd, node, timeout=wait + limits.cluster_control_timeout_secs,
                        wait=wait)
    click.echo(control_line(reply))


def control_line(reply: dict[str, object]) -> str:
    """``node2: killed (SIGKILL, pid 123)``, ``node2: running (pid 9, answers http://...)``."""
    details = [str(reply[k]) for k in ("signal",) if reply.get(k)]
    if reply.get("pid"):
        details.append(f"pid {reply['pid']}")
    if reply.get("status") is not None and reply.get("state") != "running":
        details.append(f"exit status {reply['status']}")
    if reply.get("url"):
        details.append(f"answers {reply['url']}/api/v1/health")
    if reply.get("note"):
        details.append(str(reply["note"]))
    return f"{reply['node']}: {reply['state']}" + (f" ({', '.join(details)})" if details else "")


@cluster.command("stop")
@click.argument("node")
@_DATA_OPTION
def stop_node(node: str, data_dir: Path) -> None:
    """Stop one node of a running `cluster up` (SIGTERM); it stays down until `start`."""
    _control("stop", node, data_dir)


@cluster.command("kill")
@click.argument("node")
@_DATA_OPTION
def kill_node(node: str, data_dir: Path) -> None:
    """SIGKILL one node of a running `cluster up`, to try failover; it stays down until `start`."""
    _control("kill", node, data_dir)


@cluster.command("start")
@click.argument("node")
@_DATA_OPTION
@click.option("--timeout", "wait", type=click.FloatRange(min=0.1), show_default=True,
              default=limits.cluster_up_start_wait_secs,
              help="Seconds to wait for the node to answer its health check.")
def start_node(node: str, data_dir: Path, wait: float) -> None:
    """Start again a node that `cluster stop` or `cluster kill` took down.

    Returns once the node answers /api/v1/health as itself (exit 6 if it
    does not within --timeout; `cluster up` keeps trying)."""
    _control("start", node, data_dir, wait)


@cluster.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print every member's raw status as JSON.")
@pass_state
def status(state: CliState, as_json: bool) -> None:
    """Show every member's view: reachability, op-log position, lag, mailboxes, quorum."""
    first, views = cluster_status.collect(
        state.url, lambda url: cluster_status.default_client(url, state.api_key, state.key))
    healthy = cluster_status.quorum_healthy(first)
    if as_json:
        print_json(cluster_status.as_json(state.url, first, views))
    else:
        shown = cluster_status.rows(first, views)
        click.echo(table(shown, cluster_status.columns(shown)))
        reachable = sum(v.reachable for v in views)
        click.echo(
            f"{reachable}/{len(views)} members answered; write quorum {first.get('write_quorum', '?')}; "
            f"quorum {'healthy' if healthy else 'NOT healthy'} as seen by {first.get('node_id', state.url)}"
        )
        for v in views:
            if v.error:
                click.echo(f"  {v.node_id} ({v.url or 'no URL'}): {v.error}")
    if not healthy:
        raise SystemExit(ServerError.exit_code)


@cluster.command("init")
@click.option(
    "--nodes", type=click.IntRange(1), default=3, show_default=True, help="How many nodes."
)
@click.option(
    "--base-port",
    type=int,
    default=DEFAULT_BASE_PORT,
    show_default=True,
    help="Port of node1; node i listens on base + i - 1.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for the node{i}.toml files.",
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    help="Address of the nodes: once for all, or once per node in order (default 127.0.0.1).",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/var/lib/ai-memory"),
    show_default=True,
    help="Database root; node i uses DATA/node{i}/ai-memory.db (systemd StateDirectory).",
)
@click.option("--force", is_flag=True, help="Overwrite existing config files.")
@click.option("--lanes", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Lane processes per node, each owning a share of the keys (docs/lanes.md); "
                   "about one per core a node may use. Fixed for the cluster.")
@click.option("--tls/--no-tls", "tls", default=None,
              help="Mint a cluster CA and node certificates; serve https, peers over mutual "
                   "TLS. Default: on when a host is not loopback.")
def init(
    nodes: int, base_port: int, out_dir: Path, hosts: tuple[str, ...], data_dir: Path, force: bool,
    lanes: int, tls: bool | None,
) -> None:
    """Write one TOML config per node, sharing a freshly generated cluster secret."""
    from cli.node_config import is_loopback_host

    hosts = hosts or ("127.0.0.1",)
    if tls is None:
        tls = not all(is_loopback_host(h) for h in hosts)
    specs = plan_cluster(nodes, base_port, hosts, DbPath(data_dir, "ai-memory.db"), tls=tls)
    written = write_configs(specs, out_dir, force=force, lanes=lanes)
    if tls:
        from cli import pki

        pki.mint_cluster(out_dir, [(s.node_id, s.host) for s in specs])
    for spec, path in zip(specs, written, strict=True):
        click.echo(f"{path}  {spec.node_id} {spec.url}  db {spec.db}")
    note(
        f"write quorum {majority(nodes)} of {nodes}; the files hold the cluster secret (mode 0600).\n"
        f"Install each as /etc/ai-memory/<node>.toml and start ai-memory@<node> (see deploy/README.md)."
    )
    if tls:
        note(f"TLS: {out_dir}/ca.crt is the cluster CA (clients: --ca-cert or AI_MEMORY_CA_CERT); "
             "install <node>.crt, <node>.key and ca.crt beside each config. ca.key stays here: "
             "`ai-memory tls rotate --dir` mints the next certificates with it.")
