"""The SSRF guard: hostile URLs are refused at subscribe time and at delivery time."""

from __future__ import annotations

import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from common.errors import BadRequest
from daemon.webhooks.ssrf import AddressPolicy, GuardedResolver, RefusedAddress, check_url

STRICT = AddressPolicy()
LOOPBACK_OK = AddressPolicy(allow_loopback=True)

DNS = {
    "hooks.example.com": ["93.184.216.34"],
    "metadata.google.internal": ["169.254.169.254"],
    "rebind.example.com": ["93.184.216.34", "10.0.0.7"],
    "lan.example.com": ["192.168.1.20"],
    "v6.example.com": ["2606:2800:220:1:248:1893:25c8:1946"],
    "localhost": ["127.0.0.1", "::1"],
}


async def fake_resolve(host: str, port: int) -> list[str]:
    if host not in DNS:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return DNS[host]


HOSTILE = [
    "ftp://hooks.example.com/x",
    "file:///etc/passwd",
    "gopher://hooks.example.com/",
    "javascript:alert(1)",
    "http://user:pw@hooks.example.com/hook",
    "http://user@hooks.example.com/hook",
    "http:///nohost",
    "http://hooks.example.com:99999/",
    "http://hooks.example.com/a b",
    "http://hooks.example.com/\x00",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://100.100.100.200/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://169.254.1.1/",
    "http://[fe80::1]/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://0.0.0.0:8080/",
    "http://0.1.2.3/",
    "http://[::]/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.0.1/",
    "http://100.64.0.1/",
    "http://[fc00::1]/",
    "http://lan.example.com/",
    "http://rebind.example.com/",
    "http://192.0.2.10/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://127.0.0.1:9077/",
    "http://[::1]/",
    "http://localhost/",
    "http://[::ffff:127.0.0.1]/",
    "http://nonexistent.invalid/",
    "http://" + "a" * 2100 + ".com/",
]


@pytest.mark.parametrize("url", HOSTILE)
async def test_hostile_urls_are_refused(url: str) -> None:
    with pytest.raises(BadRequest):
        await check_url(url, STRICT, fake_resolve)


@pytest.mark.parametrize("url", [
    "https://hooks.example.com/ai-memory",
    "https://hooks.example.com:8443/x?y=1",
    "https://v6.example.com/",
    "https://93.184.216.34/hook",
])
async def test_public_https_urls_pass(url: str) -> None:
    await check_url(url, STRICT, fake_resolve)


@pytest.mark.parametrize("url", [
    "http://hooks.example.com:8080/x?y=1",
    "http://v6.example.com/",
    "http://93.184.216.34/hook",
    "HTTP://93.184.216.34/hook",
    "http://[::ffff:93.184.216.34]/",
])
async def test_public_plain_http_is_refused(url: str) -> None:
    lax = AddressPolicy(allow_loopback=True, allow_private=True)
    with pytest.raises(BadRequest, match="must be https://"):
        await check_url(url, lax, fake_resolve)


async def test_plain_http_stays_for_allowed_loopback_and_private_targets() -> None:
    await check_url("http://127.0.0.1:9/", LOOPBACK_OK, fake_resolve)
    lan = AddressPolicy(allow_private=True)
    await check_url("http://lan.example.com/", lan, fake_resolve)
    await check_url("http://[::ffff:10.0.0.1]/", lan, fake_resolve)
    with pytest.raises(BadRequest, match="private"):  # not allowed: refused as before
        await check_url("http://10.0.0.1/", STRICT, fake_resolve)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/", "http://localhost:8080/h", "http://[::1]/"])
async def test_loopback_only_with_the_setting(url: str) -> None:
    with pytest.raises(BadRequest, match="loopback"):
        await check_url(url, STRICT, fake_resolve)
    await check_url(url, LOOPBACK_OK, fake_resolve)


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/", "http://metadata.google.internal/", "http://10.0.0.1/",
    "http://[fe80::1]/", "http://0.0.0.0/", "http://224.0.0.1/",
])
async def test_loopback_setting_opens_nothing_else(url: str) -> None:
    with pytest.raises(BadRequest):
        await check_url(url, LOOPBACK_OK, fake_resolve)


async def test_private_setting_allows_lan_but_never_metadata() -> None:
    lan = AddressPolicy(allow_private=True)
    await check_url("http://lan.example.com/", lan, fake_resolve)
    await check_url("http://10.1.2.3/", lan, fake_resolve)
    with pytest.raises(BadRequest, match="metadata"):
        await check_url("http://100.100.100.200/", lan, fake_resolve)
    with pytest.raises(BadRequest, match="metadata"):
        await check_url("http://[fd00:ec2::254]/", lan, fake_resolve)


class _Scripted(AbstractResolver):
    """Answers like a DNS server whose record changes between lookups."""

    def __init__(self, answers: list[list[str]]) -> None:
        self.answers = answers

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        return [{"hostname": host, "host": a, "port": port, "family": family, "proto": 0,
                 "flags": socket.AI_NUMERICHOST} for a in self.answers.pop(0)]

    async def close(self) -> None:
        pass


async def test_delivery_resolver_refuses_rebinding() -> None:
    guard = GuardedResolver(STRICT, _Scripted([["93.184.216.34"], ["169.254.169.254"],
                                               ["93.184.216.34", "127.0.0.1"]]))
    assert [r["host"] for r in await guard.resolve("hooks.example.com", 80)] == ["93.184.216.34"]
    with pytest.raises(RefusedAddress, match="metadata"):
        await guard.resolve("hooks.example.com", 80)
    with pytest.raises(RefusedAddress, match="loopback"):
        await guard.resolve("hooks.example.com", 80)
    assert isinstance(RefusedAddress("x"), OSError)  # aiohttp wraps it as a connector error
