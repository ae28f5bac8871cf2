"""TLS contexts of a node: HTTPS for its listener, mutual TLS with its peers.

One :class:`Contexts` per ``[tls]`` section holds the live server and client
contexts, built from the certificate, key and CA files. Everything that
opens a socket for this node asks for them with one call:
:func:`server_context` for a listener (``web.TCPSite(..., ssl_context=)``),
:func:`client_context` for a session that talks to peers (``ssl=`` of an
aiohttp request or connector). Both are memoized per settings section, so
the listener, the peer client, seeding and any probe share the same files.

**Reload.** :func:`reload_all` (SIGHUP, see :mod:`daemon.server`) reads the
files again and swaps in new contexts; if a file is unreadable or the key
does not match, the old contexts stay and the error is returned. The
listener keeps its first context object but gives every new handshake the
current one (an SNI callback that runs on every ClientHello, SNI or not), so
new connections present the new certificate and trust the new CA list,
while open connections (a peer channel, say) keep going. Client contexts
are handed out per request, and a new context object opens new pooled
connections.

**Client certificates.** The server asks for one and verifies it against
the CA files, but does not require it: agents and the CLI have none. The
peer endpoints do (:func:`check_peer_cert`): on a TLS node, a peer request
is refused unless the connection presented a certificate of the cluster CA
naming the member the request claims to come from (``X-AIM-Node``; naming
as in :mod:`common.certs`). The HMAC signature stays a second, independent
check.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

from common.certs import member_of
from common.errors import BadRequest, Forbidden, Unauthorized
from daemon.settings import Settings, TlsSettings

log = logging.getLogger("ai_memory.tls")


def _server(tls: TlsSettings) -> ssl.SSLContext:
    assert tls.cert is not None and tls.key is not None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls.cert, tls.key)
    if tls.ca:
        for ca in tls.ca:
            ctx.load_verify_locations(cafile=ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # agents have no certificate; peers must
    return ctx


def _client(tls: TlsSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the server and its host name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.ca:
        for ca in tls.ca:
            ctx.load_verify_locations(cafile=ca)
    else:
        ctx.load_default_certs()
    if tls.cert is not None and tls.key is not None:
        ctx.load_cert_chain(tls.cert, tls.key)  # this member's name, for mutual TLS
    return ctx


def _build(tls: TlsSettings) -> tuple[ssl.SSLContext | None, ssl.SSLContext]:
    try:
        return (_server(tls) if tls.enabled else None), _client(tls)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise BadRequest(f"cannot load TLS files (cert {tls.cert}, key {tls.key}, ca "
                         f"{', '.join(tls.ca) or '-'}): {exc}") from None


def _expecting(member: str) -> type[ssl.SSLObject]:
    """An ``SSLObject`` class whose handshake also checks that the verified
    certificate names ``member``: the cluster CA's chain proves that the
    other end is a member, not which one, so an address that answers with
    another member's certificate (a swapped config, a moved address) would
    otherwise be taken for ``member``."""

    class Expecting(ssl.SSLObject):
        def do_handshake(self) -> None:
            super().do_handshake()
            named = member_of(self.getpeercert())
            if named != member:
                log.warning("the address dialled as member %s presented the certificate "
                            "of %r: refused", member, named)
                raise ssl.SSLCertVerificationError(
                    f"certificate names member {named!r}, not {member!r}")

    return Expecting


class Contexts:
    """The live contexts of one ``[tls]`` section."""

    def __init__(self, tls: TlsSettings) -> None:
        self.tls = tls
        self.server, self.client = _build(tls)
        self._members: dict[str, ssl.SSLContext] = {}
        self._listener = self.server
        if self._listener is not None:
            self._listener.sni_callback = self._pick

    def _pick(self, sslobj: Any, _name: str | None, ctx: ssl.SSLContext) -> None:
        current = self.server
        if current is not None and current is not ctx:
            sslobj.context = current

    def listener(self) -> ssl.SSLContext | None:
        return self._listener

    def member(self, member: str) -> ssl.SSLContext:
        """The client context for dialling ``member``: :attr:`client`'s
        files, and the handshake fails unless the certificate names it."""
        ctx = self._members.get(member)
        if ctx is None:
            _, ctx = _build(self.tls)
            ctx.sslobject_class = _expecting(member)
            self._members[member] = ctx
        return ctx

    def reload(self) -> None:
        server, client = _build(self.tls)  # raises: the old ones stay
        self.server, self.client = server, client
        self._members = {}  # built again from the new files on the next dial


_LIVE: dict[TlsSettings, Contexts] = {}


def contexts(settings: Settings) -> Contexts:
    live = _LIVE.get(settings.tls)
    if live is None:
        live = _LIVE[settings.tls] = Contexts(settings.tls)
    return live


def server_context(settings: Settings) -> ssl.SSLContext | None:
    """The context of this node's listener; None: plain HTTP."""
    if not settings.tls.enabled:
        return None
    return contexts(settings).listener()


def client_context(settings: Settings, member: str | None = None) -> ssl.SSLContext | bool:
    """What to pass as aiohttp's ``ssl=`` for a request to a peer: the
    current client context with this member's certificate, or True (the
    default verification) on a node without ``[tls]``. With ``member``, on a
    TLS node, the handshake also wants a certificate naming that member."""
    if not (settings.tls.enabled or settings.tls.ca):
        return True
    live = contexts(settings)
    return live.member(member) if member is not None and settings.tls.enabled else live.client


def reload_all() -> list[str]:
    """Re-read every live section's files; the errors, one line each."""
    errors = []
    for tls, live in list(_LIVE.items()):
        try:
            live.reload()
            log.info("TLS files reloaded (cert %s, ca %s)", tls.cert, ", ".join(tls.ca) or "-")
        except BadRequest as exc:
            log.error("TLS reload failed, the previous certificates stay: %s", exc)
            errors.append(str(exc))
    return errors


def check_peer_cert(settings: Settings, transport: Any, claimed: str) -> None:
    """Refuse a peer request on a TLS node unless its connection presented a
    certificate of the cluster CA that names ``claimed`` (the sender's
    ``X-AIM-Node``). A node serving plain HTTP (loopback development)
    checks nothing here."""
    peercert = transport.get_extra_info("peercert") if transport is not None else None
    check_peer_member(settings, member_of(peercert), claimed)


def check_peer_member(settings: Settings, named: str | None, claimed: str) -> None:
    """:func:`check_peer_cert` given the member the client's certificate names
    (``None``: no certificate of the cluster CA), as a request handed to
    another lane carries it (:func:`daemon.lanes.hop.client_cert_member`)."""
    if not settings.tls.enabled:
        return
    if named is None:
        raise Unauthorized("peer request without a client certificate of the cluster CA "
                           "(mutual TLS): peers present their member certificate")
    if named != claimed:
        raise Forbidden(f"the client certificate names member {named!r}, not {claimed!r}")
