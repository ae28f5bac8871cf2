"""The cluster's own certificate authority: minting and naming certificates.

``ai-memory cluster init`` makes one CA per cluster and one certificate per
member with it; ``ai-memory tls rotate`` makes new member certificates (and,
with ``--new-ca``, a new CA). Keys are ECDSA P-256; every private key is
written readable by its owner only (mode 0600).

**How a certificate names a member.** A member certificate carries its node
id twice: as the subject common name (for people reading it) and as a URI
subject alternative name ``urn:ai-memory:node:<node id>`` (percent-encoded;
this is what the daemon checks). The other SANs are the DNS names and IP
addresses the member is reached at, so ordinary hostname verification works
for peers and clients alike. :func:`member_of` reads the node id back from
the verified peer certificate as Python's ``ssl`` reports it; a certificate
without the URI SAN (one from an operator's own PKI) names the member of
its common name. The extended key usage allows both server and client
authentication: a member is a server to its peers and a client of them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from common import limits
from common.errors import BadRequest

NODE_URI_PREFIX = "urn:ai-memory:node:"
CA_NAME = "ai-memory cluster CA"


@dataclass(frozen=True, slots=True)
class Pair:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def node_uri(node_id: str) -> str:
    return NODE_URI_PREFIX + quote(node_id, safe=":@._-~")


def _now() -> dt.datetime:
    # A minute back: a member whose clock runs a little behind still accepts it.
    return dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)


def new_ca(name: str = CA_NAME, days: int = limits.tls_ca_cert_days) -> Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    start = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(start + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert, key)


def _san(names: Iterable[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in dict.fromkeys(n.strip("[]") for n in names if n):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def new_member(ca: Pair, node_id: str, names: Iterable[str],
               days: int = limits.tls_node_cert_days) -> Pair:
    """A certificate for member ``node_id``, reached at ``names`` (DNS names
    or IP addresses), signed by ``ca``."""
    if not node_id:
        raise BadRequest("a member certificate needs a node id")
    key = ec.generate_private_key(ec.SECP256R1())
    start = _now()
    sans = [*_san(names), x509.UniformResourceIdentifier(node_uri(node_id))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(start + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return Pair(cert, key)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600, atomically (a reader never
    sees half a file: a node reloading its certificate may be reading it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def load_pair(cert_path: Path, key_path: Path) -> Pair:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise BadRequest(f"cannot read {cert_path} / {key_path}: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise BadRequest(f"{key_path} is not an ECDSA key")
    return Pair(cert, key)


def load_certs(path: Path) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle."""
    try:
        return x509.load_pem_x509_certificates(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise BadRequest(f"cannot read certificates from {path}: {exc}") from None


def member_names(cert: x509.Certificate) -> list[str]:
    """The DNS names and addresses a certificate is for (to mint its successor)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*san.get_values_for_type(x509.DNSName),
            *(str(a) for a in san.get_values_for_type(x509.IPAddress))]


def member_id(cert: x509.Certificate) -> str | None:
    """The node id a certificate (as a ``cryptography`` object) names."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        uris = []
    for uri in uris:
        if uri.startswith(NODE_URI_PREFIX):
            return unquote(uri[len(NODE_URI_PREFIX):])
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(cns[0].value) if cns else None


def member_of(peercert: Mapping[str, Any] | None) -> str | None:
    """The node id a verified peer certificate names, from the dict that
    ``SSLSocket.getpeercert()`` returns (None: no certificate)."""
    if not peercert:
        return None
    for kind, value in peercert.get("subjectAltName", ()):
        if kind == "URI" and str(value).startswith(NODE_URI_PREFIX):
            return unquote(str(value)[len(NODE_URI_PREFIX):])
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
