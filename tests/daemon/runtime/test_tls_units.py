"""TLS without processes: the [tls] settings, the link checks at start, how
a certificate names a member, the contexts' reload, the peer-certificate
check, and the client-side trust (common/trust.py)."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cli import pki
from common import certs, trust
from common.errors import BadRequest, Forbidden, Unauthorized
from daemon.runtime import tls
from daemon.settings import load_settings


@pytest.fixture(scope="module")
def pkidir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pki")
    pki.mint_cluster(out, [("node1", "10.0.0.1"), ("node2", "db-2.example"),
                           ("127.0.0.1:9079", "127.0.0.1")])
    return out


def _config(tmp: Path, body: str) -> Path:
    path = tmp / "node.toml"
    path.write_text(body)
    return path


# -- settings ---------------------------------------------------------------

def test_relative_tls_paths_resolve_against_the_config_directory(tmp_path: Path) -> None:
    conf = _config(tmp_path, '[tls]\ncert = "n.crt"\nkey = "sub/n.key"\nca = ["a.crt", "/abs/b.crt"]\n')
    s = load_settings(config_path=conf, env={})
    assert s.tls.cert == str(tmp_path / "n.crt") and s.tls.key == str(tmp_path / "sub/n.key")
    assert s.tls.ca == (str(tmp_path / "a.crt"), "/abs/b.crt") and s.tls.enabled


def test_flags_and_environment_win_and_take_a_comma_list(tmp_path: Path) -> None:
    conf = _config(tmp_path, '[tls]\ncert = "n.crt"\nkey = "n.key"\nca = "one.crt"\n')
    s = load_settings({"tls_ca": "x.crt,y.crt"}, env={"AI_MEMORY_TLS_CERT": "e.crt"},
                      config_path=conf)
    assert s.tls.cert == "e.crt" and s.tls.key == str(tmp_path / "n.key")
    assert s.tls.ca == ("x.crt", "y.crt")
    assert not load_settings(env={}).tls.enabled


def test_a_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="both a certificate and its key"):
        load_settings({"tls_cert": "a.crt"}, env={})
    with pytest.raises(BadRequest, match="path or a list"):
        load_settings(config_path=_config(tmp_path, "[tls]\nca = 3\n"), env={})


def _links(**flags: Any) -> None:
    from daemon.settings import check_links

    check_links(load_settings(flags, env={}))


def test_a_plaintext_peer_off_loopback_is_refused_unless_the_operator_insists() -> None:
    with pytest.raises(BadRequest, match=r"refusing plaintext peer node2=http://10\.1\.2\.3:9077"):
        _links(quorum_peers="node2=http://10.1.2.3:9077")
    with pytest.raises(BadRequest, match="--insecure-plaintext-peers"):
        _links(quorum_peers="node2=http://peer.example:9077")
    _links(quorum_peers="node2=http://10.1.2.3:9077", insecure_plaintext_peers=True)
    _links(quorum_peers="node2=http://127.0.0.1:9078,node3=http://localhost:9079")
    # peers on this node's own address (cluster up --host X) never leave the machine
    _links(host="10.1.2.3", quorum_peers="node2=http://10.1.2.3:9078", insecure_anonymous=True)
    _links(quorum_peers="node2=http://0.0.0.0:9078")
    load_settings({"quorum_peers": "n2=http://10.0.0.2:1"},
                  env={"AI_MEMORY_INSECURE_PLAINTEXT_PEERS": "1"})  # env form accepted


def test_tls_set_up_by_halves_is_refused(pkidir: Path) -> None:
    with pytest.raises(BadRequest, match="needs its own member certificate"):
        _links(quorum_peers="node2=https://10.0.0.2:9077")
    with pytest.raises(BadRequest, match="needs the cluster CA"):
        _links(quorum_peers="node2=https://10.0.0.2:9077", tls_cert=str(pkidir / "node1.crt"),
               tls_key=str(pkidir / "node1.key"))
    _links(quorum_peers="node2=https://10.0.0.2:9077", tls_cert=str(pkidir / "node1.crt"),
           tls_key=str(pkidir / "node1.key"), tls_ca=str(pkidir / "ca.crt"))


# -- certificates -----------------------------------------------------------

def test_member_certificates_name_the_member_and_its_addresses(pkidir: Path) -> None:
    cert = certs.load_certs(pkidir / "node2.crt")[0]
    assert certs.member_id(cert) == "node2"
    assert set(certs.member_names(cert)) == {"db-2.example", "localhost", "127.0.0.1"}
    odd = certs.load_certs(pkidir / "127.0.0.1:9079.crt")[0]
    assert certs.member_id(odd) == "127.0.0.1:9079"
    for name in ("ca.key", "node1.key", "node1.crt", "ca.crt"):
        assert stat.S_IMODE((pkidir / name).stat().st_mode) == 0o600


def test_member_of_reads_what_ssl_reports() -> None:
    peercert = {"subject": ((("commonName", "shown"),),),
                "subjectAltName": (("DNS", "a"), ("URI", certs.node_uri("10.0.0.1:9077")))}
    assert certs.member_of(peercert) == "10.0.0.1:9077"  # the URI SAN, not the CN
    assert certs.member_of({"subject": ((("commonName", "node7"),),)}) == "node7"
    assert certs.member_of(None) is None and certs.member_of({}) is None


def test_rotate_keeps_names_and_a_new_ca_is_trusted_beside_the_old(tmp_path: Path) -> None:
    pki.mint_cluster(tmp_path, [("node1", "10.0.0.1"), ("node2", "10.0.0.2")])
    old = certs.load_certs(tmp_path / "node1.crt")[0]
    [m] = pki.rotate(tmp_path, ["node1"])
    new = certs.load_certs(tmp_path / "node1.crt")[0]
    assert m.serial == format(new.serial_number, "X") != format(old.serial_number, "X")
    assert certs.member_names(new) == certs.member_names(old) and certs.member_id(new) == "node1"
    pki.rotate(tmp_path, new_ca=True)
    assert len(certs.load_certs(tmp_path / "ca.crt")) == 2
    assert pki.drop_old_cas(tmp_path) == 1 and len(certs.load_certs(tmp_path / "ca.crt")) == 1
    with pytest.raises(Exception, match="no certificate for node9"):
        pki.rotate(tmp_path, ["node9"])


# -- contexts, reload, the peer check ----------------------------------------

def _settings(pkidir: Path, node: str = "node1") -> Any:
    return load_settings({"tls_cert": str(pkidir / f"{node}.crt"),
                          "tls_key": str(pkidir / f"{node}.key"),
                          "tls_ca": str(pkidir / "ca.crt")}, env={})


def test_contexts_are_shared_and_a_failed_reload_keeps_the_old_ones(tmp_path: Path) -> None:
    pki.mint_cluster(tmp_path, [("node1", "127.0.0.1")])
    s = _settings(tmp_path)
    listener = tls.server_context(s)
    assert listener is tls.server_context(s) and listener is not None
    assert listener.verify_mode == ssl.CERT_OPTIONAL
    client = tls.client_context(s)
    assert isinstance(client, ssl.SSLContext)
    pki.rotate(tmp_path)
    assert not [e for e in tls.reload_all() if str(tmp_path) in e]
    assert tls.client_context(s) is not client and tls.server_context(s) is listener
    (tmp_path / "node1.key").write_text("garbage")
    errors = [e for e in tls.reload_all() if str(tmp_path) in e]
    assert errors and "cannot load TLS files" in errors[0]
    assert tls.contexts(s).server is not None  # still the previous good one
    assert tls.client_context(load_settings(env={})) is True


def test_the_peer_check_wants_a_certificate_naming_the_claimed_member(pkidir: Path) -> None:
    s = _settings(pkidir)

    def transport(peercert: Any) -> Any:
        return SimpleNamespace(get_extra_info=lambda name: peercert if name == "peercert" else None)

    named = {"subjectAltName": (("URI", certs.node_uri("node2")),)}
    tls.check_peer_cert(s, transport(named), "node2")
    with pytest.raises(Forbidden, match="names member 'node2', not 'node3'"):
        tls.check_peer_cert(s, transport(named), "node3")
    with pytest.raises(Unauthorized, match="client certificate"):
        tls.check_peer_cert(s, transport(None), "node2")
    with pytest.raises(Unauthorized):
        tls.check_peer_cert(s, None, "node2")
    tls.check_peer_cert(load_settings(env={}), None, "node2")  # plain HTTP: nothing to check


# -- client trust --------------------------------------------------------------

def test_client_trust_prefers_the_flag_then_the_environment(pkidir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trust, "default_ca", None)
    monkeypatch.delenv(trust.CA_ENV, raising=False)
    assert trust.ca_cert() is None and trust.verify_value() is True
    monkeypatch.setenv(trust.CA_ENV, str(pkidir / "ca.crt"))
    assert trust.ca_cert() == str(pkidir / "ca.crt")
    assert isinstance(trust.verify_value(), ssl.SSLContext)
    assert trust.ca_cert("explicit.crt") == "explicit.crt"
    with pytest.raises(BadRequest, match="cannot read the CA file"):
        trust.context(str(pkidir / "missing.crt"))


def test_explain_finds_a_verification_failure_under_wrappers() -> None:
    import urllib.error

    inner = ssl.SSLCertVerificationError(1, "certificate verify failed")
    inner.verify_message = "unable to get local issuer certificate"
    wrapped = urllib.error.URLError(inner)
    assert trust.explain(wrapped, "https://h:1") == (
        "cannot verify the TLS certificate of https://h:1: unable to get local issuer certificate")
    assert trust.explain(urllib.error.URLError(ConnectionRefusedError()), "x") is None


# -- the dialling side: the address must present the member it is dialled as --

async def test_a_peer_address_presenting_another_members_certificate_is_refused(
        tmp_path: Path) -> None:
    """node1 dials "node2" at an address where node3 answers (a swapped
    config): the chain is the cluster CA's, but the certificate names node3,
    so both the request and the channel are refused; dialled as node3 the
    same address is fine."""
    import aiohttp
    import msgpack
    from aiohttp import web

    from daemon.peer.channel import LINK_PATH
    from daemon.peer.client import PeerClient, PeerUnreachable

    pki.mint_cluster(tmp_path, [(n, "127.0.0.1") for n in ("node1", "node2", "node3")])

    async def answer(_request: web.Request) -> web.Response:
        return web.Response(body=msgpack.packb({"ok": True}), content_type="application/msgpack")

    async def link(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for _ in ws:
            pass
        return ws

    app = web.Application()
    app.router.add_post("/peer/v1/test", answer)
    app.router.add_get(LINK_PATH, link)
    runner = web.AppRunner(app)
    await runner.setup()
    node3 = _settings(tmp_path, "node3")
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.server_context(node3))
    await site.start()
    port = runner.addresses[0][1]
    url = f"https://127.0.0.1:{port}"
    node1 = _settings(tmp_path, "node1")
    client = PeerClient("node1", {"node2": url, "node3": url}, None, now_s=lambda: 0.0,
                        tls=lambda peer: tls.client_context(node1, peer))
    await client.start()
    try:
        assert await client.call("node3", "/peer/v1/test", {}) == {"ok": True}
        with pytest.raises(PeerUnreachable, match="names member 'node3', not 'node2'"):
            await client.call("node2", "/peer/v1/test", {})
        with pytest.raises(PeerUnreachable, match="names member 'node3', not 'node2'"):
            await client._open_channel("node2", 5.0)
        opened = await client._open_channel("node3", 5.0)
        assert opened is not None
        ws = opened[0]
        assert isinstance(ws, aiohttp.ClientWebSocketResponse)
        await ws.close()
    finally:
        await client.close()
        await runner.cleanup()
