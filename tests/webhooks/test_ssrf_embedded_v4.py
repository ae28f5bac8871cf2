"""IPv6 literals that embed an IPv4 address are judged by that address:
loopback and private targets written as IPv4-compatible, IPv4-mapped,
SIIT, NAT64 or 6to4 IPv6 are refused unless the matching setting allows
them, at subscribe time over HTTP (writing nothing) and at delivery time."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import BadRequest
from daemon.webhooks.ssrf import AddressPolicy, check_literal, check_url
from tests.webhooks.conftest import hooks_with

STRICT = AddressPolicy()

LOOPBACK = [
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://[::7f00:1]:9077/",  # the same, in hex
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "http://[0:0:0:0:0:ffff:7f00:1]/",
    "http://[::ffff:0:127.0.0.1]/",  # SIIT (RFC 2765)
    "http://[64:ff9b::127.0.0.1]/",  # NAT64 well-known prefix
    "http://[2002:7f00:1::1]/",  # 6to4 of 127.0.0.1
]
PRIVATE = [
    "http://[::10.0.0.1]/",
    "http://[::192.168.1.1]/",
    "http://[::ffff:172.16.0.9]/",
    "http://[::ffff:0:10.1.2.3]/",
    "http://[64:ff9b::a00:1]/",
    "http://[2002:c0a8:101::]/",  # 6to4 of 192.168.1.1
    "http://[64:ff9b:1::a00:1]/",  # local-use NAT64 (RFC 8215)
]
ALWAYS = [
    "http://[::169.254.169.254]/",  # metadata, IPv4-compatible
    "http://[::ffff:0:169.254.169.254]/",
    "http://[::0.0.0.0]/",
    "http://[::224.0.0.1]/",
]


@pytest.mark.parametrize("url", LOOPBACK)
async def test_embedded_loopback_needs_the_loopback_setting(url: str) -> None:
    with pytest.raises(BadRequest, match="loopback"):
        await check_url(url, STRICT)
    with pytest.raises(BadRequest, match="loopback"):
        check_literal(url, AddressPolicy(allow_private=True))
    check_literal(url, AddressPolicy(allow_loopback=True))


@pytest.mark.parametrize("url", PRIVATE)
async def test_embedded_private_needs_the_private_setting(url: str) -> None:
    with pytest.raises(BadRequest, match="private"):
        await check_url(url, STRICT)
    with pytest.raises(BadRequest, match="private"):
        check_literal(url, AddressPolicy(allow_loopback=True))
    check_literal(url, AddressPolicy(allow_private=True))


@pytest.mark.parametrize("url", ALWAYS)
async def test_embedded_metadata_unspecified_multicast_never(url: str) -> None:
    with pytest.raises(BadRequest):
        check_literal(url, AddressPolicy(allow_loopback=True, allow_private=True))


@pytest.mark.parametrize("url", ["http://[::1]/", "http://[::]/"])
def test_v6_loopback_and_unspecified_are_not_read_as_ipv4(url: str) -> None:
    with pytest.raises(BadRequest, match=r"loopback|unspecified"):
        check_literal(url, STRICT)


@pytest.mark.parametrize("url", ["https://[::ffff:93.184.216.34]/",
                                 "https://[64:ff9b::5db8:d822]/", "https://[2002:5db8:d822::1]/"])
def test_embedded_public_address_passes(url: str) -> None:
    check_literal(url, STRICT)
    with pytest.raises(BadRequest, match="must be https://"):  # public: never in clear
        check_literal("http" + url[5:], STRICT)


@pytest.mark.parametrize("url", LOOPBACK + PRIVATE)
async def test_subscribe_refuses_and_writes_nothing(daemon_factory: Any, url: str) -> None:
    d = await daemon_factory(hooks_with(allow_loopback_webhooks=False), db="strict.db")
    resp = await d.c.post("/api/v1/subscriptions", json={"url": url},
                          headers={"X-Agent-Id": "alice"})
    body = await resp.json()
    assert resp.status == 400, body
    assert body["code"] == "bad_request" and ("loopback" in body["error"]
                                              or "private" in body["error"])
    n = await d.hooks.db.call(
        lambda c: c.execute("SELECT COUNT(*) FROM webhook_subscriptions").fetchone()[0])
    assert n == 0
