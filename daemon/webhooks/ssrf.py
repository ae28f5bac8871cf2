"""Server-side request forgery guard for webhook URLs.

A subscription makes this daemon POST to a URL someone else chose, from
inside the operator's network, so the URL is checked twice:

* at subscribe time, :func:`check_url` refuses anything but plain
  ``http``/``https`` URLs without credentials, resolves the host and
  refuses it unless **every** address it resolves to is allowed;
* at delivery time the same policy runs again inside the HTTP client's own
  resolver (:class:`GuardedResolver`), so the connection goes to exactly
  an address that was just checked -- a DNS answer that changed since
  subscribe time (rebinding) cannot slip a private address in. IP-literal
  hosts skip aiohttp's resolver, so :func:`check_literal` covers them
  before each attempt. Redirects are never followed (the caller passes
  ``allow_redirects=False``) and environment proxies are not used.

Address policy (:meth:`AddressPolicy.refusal`): cloud metadata addresses,
unspecified (``0.0.0.0/8``, ``::``), multicast and link-local addresses are
always refused; loopback only when ``allow_loopback_webhooks`` is set;
private ranges (RFC 1918, carrier-grade NAT ``100.64/10``, ``fc00::/7``)
only when ``allow_private_webhooks`` is set; anything else not globally
routable (documentation, benchmarking, reserved, broadcast) is refused.
A plain ``http://`` URL is accepted only for a target the operator allowed
and that stays inside the machine or the LAN: every address it resolves to
is loopback or private (:meth:`AddressPolicy.plaintext_refusal`); anything
public must be ``https://``, so a payload never crosses the internet in
clear. At delivery the literal check repeats this for IP literals.
IPv6 forms that embed an IPv4 address are judged by the embedded address
too: IPv4-mapped ``::ffff:a.b.c.d``, the deprecated IPv4-compatible
``::a.b.c.d``, SIIT ``::ffff:0:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4
``2002::/16`` and Teredo. The local-use NAT64 range ``64:ff9b:1::/48``
(RFC 8215), whose embedding depends on the operator's prefix length, counts
as private.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import SplitResult, urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from common import limits
from common.errors import BadRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolve = Callable[[str, int], Awaitable[list[str]]]

METADATA_ADDRESSES: Final = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
    "169.254.170.2",  # AWS ECS task metadata
    "169.254.169.253",  # AWS DNS resolver
    "fd00:ec2::254",  # AWS IMDS over IPv6
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",  # Oracle Cloud
))
_THIS_NETWORK: Final = ipaddress.ip_network("0.0.0.0/8")  # reaches the local host on Linux
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_SIIT: Final = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 IPv4-translated
_V4_COMPAT: Final = ipaddress.ip_network("::/96")  # RFC 4291 IPv4-compatible (deprecated)
_PRIVATE: Final = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7",
    "64:ff9b:1::/48"))


class RefusedAddress(OSError):
    """A webhook host resolved to an address the policy refuses."""


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _V4_COMPAT and int(ip) > 1:  # :: and ::1 are themselves, not IPv4
        return ipaddress.IPv4Address(int(ip))
    if ip in _NAT64 or ip in _SIIT:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    allow_loopback: bool = False
    allow_private: bool = False

    def refusal(self, ip: IPAddress) -> str | None:
        """Why ``ip`` may not be a webhook target, or ``None`` if it may."""
        inner = _embedded_v4(ip)
        if inner is not None:
            why = self.refusal(inner)
            if why is not None:
                return why
        if ip in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK):
            return "an unspecified address"
        if ip.is_multicast:
            return "a multicast address"
        if ip.is_link_local:
            return "a link-local address"
        if ip.is_loopback:
            return None if self.allow_loopback else (
                "a loopback address (allowed only with webhooks.allow_loopback_webhooks)")
        if any(ip.version == net.version and ip in net for net in _PRIVATE):
            return None if self.allow_private else (
                "a private address (allowed only with webhooks.allow_private_webhooks)")
        if inner is None and not ip.is_global:
            return "a reserved, non-routable address"
        return None


    @staticmethod
    def plaintext_refusal(ip: IPAddress) -> str | None:
        """Why a plain ``http://`` delivery to ``ip`` is refused (None: it is
        a loopback or private address, which :meth:`refusal` gates)."""
        inner = _embedded_v4(ip) or ip
        if inner.is_loopback or any(inner.version == net.version and inner in net
                                    for net in _PRIVATE):
            return None
        return "a public address: webhook URLs must be https:// (plain http only to " \
               "loopback or private targets the operator allowed)"


def _why(policy: AddressPolicy, ip: IPAddress, plaintext: bool) -> str | None:
    why = policy.refusal(ip)
    if why is None and plaintext:
        why = policy.plaintext_refusal(ip)
    return why


def _parse_ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def _split(url: str) -> tuple[SplitResult, str, int]:
    if len(url) > limits.webhook_url_max_chars:
        raise BadRequest(f"url longer than {limits.webhook_url_max_chars} characters "
                         "(limits.webhook_url_max_chars)")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise BadRequest("url must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadRequest(f"url is not valid: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise BadRequest("url scheme must be http or https")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise BadRequest("url must not carry credentials; use the subscription secret")
    host = parts.hostname
    if not host:
        raise BadRequest("url has no host")
    return parts, host, port or (443 if parts.scheme == "https" else 80)


def check_literal(url: str, policy: AddressPolicy) -> tuple[str, int, bool]:
    """The checks that need no DNS: scheme, credentials, size, and the
    address itself when the host is an IP literal. Returns
    ``(host, port, is_literal)``; raises :class:`BadRequest` on refusal."""
    parts, host, port = _split(url)
    ip = _parse_ip(host)
    if ip is not None:
        why = _why(policy, ip, parts.scheme == "http")
        if why is not None:
            raise BadRequest(f"url host {host} is {why}")
    return host, port, ip is not None


async def system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def check_url(url: str, policy: AddressPolicy, resolve: Resolve = system_resolve) -> None:
    """Refuse ``url`` (``BadRequest``) unless it is a safe webhook target now."""
    host, port, literal = check_literal(url, policy)
    if literal:
        return
    plaintext = url[:5].lower() == "http:"
    try:
        addresses = await resolve(host, port)
    except OSError as exc:
        raise BadRequest(f"url host {host!r} does not resolve: {exc}") from None
    if not addresses:
        raise BadRequest(f"url host {host!r} does not resolve")
    for raw in addresses:
        ip = _parse_ip(raw)
        why = "not an IP address" if ip is None else _why(policy, ip, plaintext)
        if why is not None:
            raise BadRequest(f"url host {host!r} resolves to {raw}, {why}")


class GuardedResolver(AbstractResolver):
    """aiohttp resolver that hands the connector only addresses the policy
    allows, and refuses the host outright if any answer is refused."""

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._inner = inner or ThreadedResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for res in results:
            ip = _parse_ip(res["host"])
            why = "not an IP address" if ip is None else self.policy.refusal(ip)
            if why is not None:
                raise RefusedAddress(f"webhook host {host!r} resolves to {res['host']}, {why}")
        return results

    async def close(self) -> None:
        await self._inner.close()
