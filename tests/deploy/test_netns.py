"""The network helper itself (tests/deploy/netns.py): skips say why, a link cut
both ways silences both directions, a one-way cut only one, and cleanup
leaves no namespace behind. Datagrams (UDP) show the direction: TCP would
need both."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.deploy import netns
from tests.deploy.netns import CLIENT, Network

RECEIVE = ("import socket, sys\n"
           "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
           "s.bind((sys.argv[1], 5000)); s.settimeout(1.0)\n"
           "try:\n    print(s.recv(100).decode())\n"
           "except OSError:\n    print('nothing')\n")
SEND = ("import socket, sys, time\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for _ in range(8):\n"
        "    try:\n        s.sendto(b'hello', (sys.argv[1], 5000))\n"
        "    except OSError:\n        pass\n"
        "    time.sleep(0.1)\n")


def test_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.shutil, "which", lambda _: None)
    assert "no `ip` command" in (netns.unavailable() or "")
    monkeypatch.setattr(netns.shutil, "which", lambda _: "/usr/sbin/ip")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert "need root" in (netns.unavailable() or "")


def host_to_client(net: Network, host: str) -> bool:
    """Does a datagram from ``host`` reach the client?"""
    recv = subprocess.Popen(net.exec_argv(CLIENT, [sys.executable, "-c", RECEIVE,
                                                   net.addresses[CLIENT]]),
                            stdout=subprocess.PIPE, text=True)
    subprocess.run(net.exec_argv(host, [sys.executable, "-c", SEND, net.addresses[CLIENT]]),
                   check=True, timeout=10)
    out, _ = recv.communicate(timeout=10)
    return out.strip() == "hello"


@pytest.mark.slow
def test_cuts_and_cleanup() -> None:
    reason = netns.unavailable()
    if reason:
        pytest.skip(f"needs network namespaces: {reason}")
    net = Network(hosts=("a",))
    try:
        net.up()
        names = set(net.namespaces.values()) | {net.bridge_ns}
        assert host_to_client(net, "a")
        for way, passes in (("both", False), ("out", False), ("in", True)):
            net.cut("a", way)
            assert host_to_client(net, "a") is passes, way
            net.heal("a")
            assert host_to_client(net, "a"), f"after healing {way}"
    finally:
        net.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not names & {line.split()[0] for line in listed.splitlines() if line.strip()}
