"""``ai-memory serve``: run one node in the foreground."""

from __future__ import annotations

import errno
import os
import sys

import click

from common.errors import AiMemoryError


@click.command("serve")
@click.option("--host", default=None, help="Address to bind (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 9077).")
@click.option("--db", default=None, help="SQLite path (env AI_MEMORY_DB).")
@click.option("--node-id", default=None, help="This node's id (default HOST:PORT).")
@click.option("--quorum-writes", type=int, default=None, help="W: members that must hold a write.")
@click.option("--quorum-peers", default=None, help="Other members: URL or ID=URL, comma separated.")
@click.option("--quorum-timeout-ms", type=int, default=None, help="Wait for W acks (default 2000).")
@click.option("--catchup-interval-secs", type=float, default=None,
              help="Anti-entropy interval (default 2).")
@click.option("--cluster-secret", default=None, envvar="AI_MEMORY_CLUSTER_SECRET",
              help="Shared secret that signs peer requests.")
@click.option("--initial-cluster-state", type=click.Choice(["auto", "new", "existing"]),
              default=None,
              help="What a member with no database does. auto (default): asks the other "
                   "members; seeded from one that holds data, bootstraps only with all of "
                   "them, each new too, and waits otherwise. existing: never bootstraps, "
                   "waits to be seeded. new: bootstraps at once (only for a cluster whose "
                   "other members are gone for good).")
@click.option("--cluster-id", default=None,
              help="This cluster's id (cluster init writes one; default: derived from the "
                   "member list). A member refuses data of another cluster.")
@click.option("--auth", type=click.Choice(["anonymous", "keys"]), default=None,
              help="anonymous (default): X-Agent-Id is a claim, loopback only; keys: every "
                   "request but GET /health needs a key (env AI_MEMORY_AUTH).")
@click.option("--insecure-anonymous", is_flag=True, default=False,
              help="Serve anonymous mode on a non-loopback address anyway.")
@click.option("--tls-cert", default=None, type=click.Path(dir_okay=False),
              help="Serve HTTPS with this certificate (PEM; env AI_MEMORY_TLS_CERT, [tls] cert).")
@click.option("--tls-key", default=None, type=click.Path(dir_okay=False),
              help="The certificate's private key (env AI_MEMORY_TLS_KEY, [tls] key).")
@click.option("--tls-ca", default=None,
              help="Cluster CA file(s), comma separated: verifies peers and client "
                   "certificates (env AI_MEMORY_TLS_CA, [tls] ca).")
@click.option("--insecure-plaintext-peers", is_flag=True, default=False,
              help="Accept http:// peers that are not loopback (unencrypted peer traffic).")
@click.option("--config", "config", default=None, type=click.Path(exists=True, dir_okay=False),
              help="TOML config file.")
@click.option("--log-level", default=None, help="debug, info, warning, error.")
@click.option("--lanes", type=int, default=None,
              help="Lane processes of this node, each owning a share of the keys "
                   "(docs/lanes.md; env AI_MEMORY_LANES, [server] lanes; default 1). "
                   "Fixed per cluster: every member runs the same count.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default=None,
              help="text (default) or json: one object per line (env AI_MEMORY_LOG_FORMAT).")
def serve(**flags: object) -> None:
    """Run an ai-memory daemon (one cluster member) until SIGTERM."""
    for name in ("insecure_anonymous", "insecure_plaintext_peers"):
        if not flags.get(name):
            flags.pop(name, None)
    start(flags)


def start(flags: dict[str, object]) -> None:
    """Serve with ``flags``: the node itself, or, with more than one lane and
    outside a lane process, the supervisor of its lanes (daemon/lanes/)."""
    import daemon.lanes.supervisor as supervisor
    from daemon.runtime.systemd import Notifier
    from daemon.runtime.tls import server_context
    from daemon.settings import check_exposure, load_settings

    try:
        settings = load_settings(flags)
        check_exposure(settings)
        server_context(settings)  # a TLS file that cannot be read stops the start here
    except (AiMemoryError, OSError, ValueError) as exc:
        click.echo(f"ai-memory serve: {exc}", err=True)
        sys.exit(2)
    from daemon.lanes.resize import interrupted

    journal = interrupted(settings)
    if journal is not None:
        click.echo(f"ai-memory serve: a lane count change of this node stopped during its swap "
                   f"({journal}): run `ai-memory lanes resize --check` with this node's "
                   "--config/--db to finish it, then start", err=True)
        sys.exit(4)
    notifier = Notifier.from_env(os.environ)
    if settings.server.laned and supervisor.INDEX_ENV not in os.environ:
        try:
            supervisor.refuse_another_count(settings)
        except AiMemoryError as exc:
            click.echo(f"ai-memory serve: {exc}", err=True)
            sys.exit(exc.exit_code)
        sys.exit(supervisor.run(settings, flags, notifier))
    from daemon.server import run  # here: a supervisor serves nothing (and starts faster)

    try:
        run(settings, notifier)
    except AiMemoryError as exc:
        click.echo(f"ai-memory serve: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        where = f"{settings.server.host}:{settings.server.port}"
        hint = (" (another ai-memory serve or `cluster up` may hold it; pick another --port)"
                if exc.errno == errno.EADDRINUSE else "")
        click.echo(f"ai-memory serve: cannot listen on {where}: {exc.strerror}{hint}", err=True)
        sys.exit(2)
