"""``ai-memory tls rotate``: new certificates from the cluster's CA.

Works on the directory ``cluster init --tls`` wrote (see :mod:`cli.pki`):
mints the next certificate of each member (or of the ``--node`` given) from
the CA kept there, valid for the same names. ``--new-ca`` first makes a new
CA and writes ``ca.crt`` as a bundle of the new and the old, so members
trust both while the switch goes on; ``--drop-old-ca`` ends the switch.
Copy the files to the members and send each node SIGHUP (``systemctl
reload``): new connections use them, open ones keep going. The order for a
CA rotation is in docs/operations.md ("Rotating certificates").
"""

from __future__ import annotations

from pathlib import Path

import click

from cli import pki
from cli.output import note


@click.group("tls")
def tls() -> None:
    """Certificates of a TLS cluster (from `cluster init --tls`)."""


@tls.command("rotate")
@click.option("--dir", "out_dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              required=True, help="The directory `cluster init` wrote (it holds ca.key).")
@click.option("--node", "nodes", multiple=True, help="Only this member (repeat); default: all.")
@click.option("--new-ca", is_flag=True,
              help="Make a new CA first; ca.crt then holds the new and the old CA.")
@click.option("--drop-old-ca", is_flag=True,
              help="End a CA rotation: ca.crt keeps only the current CA (mints nothing).")
def rotate(out_dir: Path, nodes: tuple[str, ...], new_ca: bool, drop_old_ca: bool) -> None:
    """Mint new member certificates (and with --new-ca a new CA)."""
    if drop_old_ca:
        if new_ca or nodes:
            raise click.UsageError("--drop-old-ca mints nothing: give it alone")
        dropped = pki.drop_old_cas(out_dir)
        click.echo(f"{out_dir / pki.CA_CERT}: the current CA only ({dropped} dropped)")
        note("copy ca.crt to every member and client, then reload each node (SIGHUP)")
        return
    minted = pki.rotate(out_dir, list(nodes) or None, new_ca=new_ca)
    if new_ca:
        click.echo(f"{out_dir / pki.CA_CERT}: new CA + the old one (bundle)")
    for m in minted:
        click.echo(f"{m.cert}  {m.node_id}  serial {m.serial}")
    if new_ca:
        note("first copy ca.crt to every member and reload each (SIGHUP); only then install "
             "the new member certificates and reload again; finally `tls rotate "
             "--drop-old-ca` (docs/operations.md)")
    else:
        note("copy each NODE.crt and NODE.key to its member and reload it (SIGHUP, or "
             "`systemctl restart` under the systemd credentials layout)")
