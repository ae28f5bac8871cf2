"""The cluster's certificate files in the directory ``cluster init`` writes.

Layout (every file mode 0600; names are what the node configs and the
systemd drop-in ``deploy/ai-memory@.service.d/tls.conf`` expect)::

    DIR/ca.crt       the CA(s) members and clients trust (a bundle during a CA rotation)
    DIR/ca.key       the CA's private key: stays here, never on a node
    DIR/node1.crt    node1's certificate (names it, see common/certs.py)
    DIR/node1.key    its private key
    DIR/node1.toml   its config; [tls] names the three files above, relative
                     to the config's own directory

A config's relative ``[tls]`` paths resolve against its directory, so the
same file works started by hand from ``DIR`` and under systemd, which hands
the config and the three files to the service as credentials in one
directory. :func:`mint_cluster` makes everything for a new cluster;
:func:`rotate` makes new member certificates from the CA (``new_ca``: from a
new CA, with ``ca.crt`` holding the new and the old one so that members
accept both during the switch); :func:`drop_old_cas` ends a CA rotation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from common import certs
from common.errors import BadRequest, NotFound

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
RETIRED_CA_KEY = "ca.key.retired"


@dataclass(frozen=True, slots=True)
class Minted:
    node_id: str
    cert: Path
    serial: str


def cert_file(node_id: str) -> str:
    return f"{node_id}.crt"


def key_file(node_id: str) -> str:
    return f"{node_id}.key"


def names_for(host: str) -> list[str]:
    """What a member's certificate is valid for: its address, and this
    machine's loopback names (the CLI on the node's own host)."""
    return [host, "localhost", "127.0.0.1"]


def _write_member(out: Path, pair: certs.Pair, node_id: str) -> Minted:
    certs.write_private(out / key_file(node_id), pair.key_pem())
    certs.write_private(out / cert_file(node_id), pair.cert_pem())
    return Minted(node_id, out / cert_file(node_id), format(pair.cert.serial_number, "X"))


def mint_cluster(out: Path, members: list[tuple[str, str]]) -> list[Minted]:
    """A new CA and one certificate per ``(node_id, host)``."""
    ca = certs.new_ca()
    certs.write_private(out / CA_KEY, ca.key_pem())
    certs.write_private(out / CA_CERT, ca.cert_pem())
    return [_write_member(out, certs.new_member(ca, node, names_for(host)), node)
            for node, host in members]


def load_ca(out: Path) -> tuple[certs.Pair, list[x509.Certificate]]:
    """The signing CA (the certificate of ``ca.key``) and every CA ``ca.crt`` holds."""
    if not (out / CA_KEY).exists():
        raise NotFound(f"no {CA_KEY} in {out}: give the directory `ai-memory cluster init --tls` "
                       "wrote (it keeps the CA's key)")
    try:
        key = serialization.load_pem_private_key((out / CA_KEY).read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise BadRequest(f"cannot read {out / CA_KEY}: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise BadRequest(f"{out / CA_KEY} is not an ECDSA key")
    bundle = certs.load_certs(out / CA_CERT)
    mine = [c for c in bundle if c.public_key() == key.public_key()]
    if not mine:
        raise BadRequest(f"{out / CA_CERT} holds no certificate for {out / CA_KEY}")
    return certs.Pair(mine[0], key), bundle


def members_in(out: Path) -> list[str]:
    """The node ids with a certificate in ``out``."""
    return sorted(p.stem for p in out.glob("*.crt") if p.name != CA_CERT)


def rotate(out: Path, nodes: list[str] | None = None, *, new_ca: bool = False) -> list[Minted]:
    """New certificates for ``nodes`` (default: every member in ``out``),
    valid for the same names as the ones they replace."""
    ca, bundle = load_ca(out)
    nodes = nodes or members_in(out)
    missing = [n for n in nodes if not (out / cert_file(n)).exists()]
    if missing:
        raise NotFound(f"no certificate for {', '.join(missing)} in {out}")
    if not nodes:
        raise NotFound(f"no member certificates in {out}")
    olds = {n: certs.load_certs(out / cert_file(n))[0] for n in nodes}
    if new_ca:
        fresh = certs.new_ca()
        certs.write_private(out / RETIRED_CA_KEY, ca.key_pem())
        pem = fresh.cert_pem() + b"".join(
            c.public_bytes(serialization.Encoding.PEM) for c in bundle)
        certs.write_private(out / CA_CERT, pem)  # new and old: members accept both
        certs.write_private(out / CA_KEY, fresh.key_pem())
        ca = fresh
    minted = []
    for node in nodes:
        old = olds[node]
        node_id = certs.member_id(old) or node
        minted.append(_write_member(out, certs.new_member(ca, node_id, certs.member_names(old)),
                                    node))
    return minted


def drop_old_cas(out: Path) -> int:
    """End a CA rotation: ``ca.crt`` holds the signing CA only. Returns how
    many CAs were dropped."""
    ca, bundle = load_ca(out)
    certs.write_private(out / CA_CERT, ca.cert_pem())
    (out / RETIRED_CA_KEY).unlink(missing_ok=True)
    return len(bundle) - 1
