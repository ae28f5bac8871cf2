"""Three hosts and a client on a private network, made of Linux network namespaces.

How it works: :class:`Network` makes one namespace per host plus one for the
client and one for a bridge. Each host or client namespace gets a veth pair:
one end (``eth0``) stays in it with its own address from 198.18.0.0/24 (the
benchmarking range: only our own test hosts, inside our own namespaces, ever
hold these addresses), the other end (``p-NAME``) is a port of the bridge
``br0``. Nothing is added to the root namespace, so the test never touches
the machine's real network, and the names carry a random suffix so that runs
(and other engineers) on one machine do not collide.

Why namespaces: each node then really is a separate host with its own
address and its own links, started as systemd starts it (``serve --config``
under ``ip netns exec``), and faults are made where they happen on real
networks: a link taken down (both ways), or every packet dropped on one side
of a link (one way; neighbour entries are static, so ARP does not turn a
one-way cut into a two-way one). ``tc ... netem loss 100%`` is used for the one-way cut
where the kernel has netem; otherwise the ``blackhole`` qdisc, which drops
every packet a device sends just the same (this machine's kernel has no
netem). :func:`unavailable` says why namespaces cannot be made here (so the
test is skipped, saying why); :meth:`Network.close` kills every process left
in the namespaces and deletes them, and is safe to call twice.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

SUBNET = "198.18.0"  # /24, RFC 2544 benchmarking range
CLIENT = "client"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or ``None`` if they can."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) on this machine"
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    probe = f"ai-mem-probe-{secrets.token_hex(3)}"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"`ip netns add` failed: {made.stderr.strip() or made.returncode}"
        veth = _ip("-n", probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0",
                   check=False)
        if veth.returncode != 0:
            return f"cannot make a veth pair in a namespace: {veth.stderr.strip()}"
        bridge = _ip("-n", probe, "link", "add", "br0", "type", "bridge", check=False)
        if bridge.returncode != 0:
            return f"cannot make a bridge in a namespace: {bridge.stderr.strip()}"
        return None
    finally:
        _ip("netns", "del", probe, check=False)


@dataclass
class Network:
    """The namespaces, addresses and links of one test run (see the module doc)."""

    hosts: Sequence[str] = ("a", "b", "c")
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    namespaces: dict[str, str] = field(default_factory=dict)  # name -> namespace
    addresses: dict[str, str] = field(default_factory=dict)  # name -> IPv4 address
    one_way_method: str = ""
    _cuts: dict[str, list[list[str]]] = field(default_factory=dict)

    @property
    def bridge_ns(self) -> str:
        return f"aim-br-{self.tag}"

    def up(self) -> Network:
        """Make the bridge, every host and the client; ``lo`` is up everywhere."""
        try:
            self._netns(self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
            names = [*self.hosts, CLIENT]
            for i, name in enumerate(names):
                ns = self.namespaces[name] = f"aim-{name}-{self.tag}"
                self._netns(ns)
                addr = f"{SUBNET}.{100 if name == CLIENT else 11 + i}"
                self.addresses[name] = addr
                # made directly in both namespaces: the root namespace never sees them
                _ip("link", "add", "eth0", "netns", ns, "type", "veth",
                    "peer", "name", f"p-{name}", "netns", self.bridge_ns)
                _ip("-n", self.bridge_ns, "link", "set", f"p-{name}", "master", "br0")
                _ip("-n", self.bridge_ns, "link", "set", f"p-{name}", "up")
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
            self._static_neighbours()
        except BaseException:
            self.close()
            raise
        return self

    def _static_neighbours(self) -> None:
        """Every namespace knows every other's MAC address for good, so that a
        one-way cut stays one way: with ARP, the cut side's neighbour entries
        would fail within seconds and silence the other direction too."""
        macs = {}
        for name, ns in self.namespaces.items():
            link = json.loads(_ip("-j", "-n", ns, "link", "show", "eth0").stdout)
            macs[name] = link[0]["address"]
        for name, ns in self.namespaces.items():
            for other, mac in macs.items():
                if other != name:
                    _ip("-n", ns, "neigh", "replace", self.addresses[other], "lladdr", mac,
                        "dev", "eth0", "nud", "permanent")

    def _netns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def exec_argv(self, name: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside host (or client) ``name``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[name], *argv]

    # -- faults --------------------------------------------------------------

    def cut(self, name: str, direction: str = "both") -> None:
        """Cut host ``name`` off: ``both`` takes its link down; ``out`` drops
        every packet it sends, ``in`` every packet sent to it (one way)."""
        if direction == "both":
            self._run_cut(name, ["-n", self.namespaces[name], "link", "set", "eth0", "down"],
                          ["-n", self.namespaces[name], "link", "set", "eth0", "up"])
            return
        # the device whose sending to drop: the host's own end (out) or the bridge's (in)
        ns, dev = ((self.namespaces[name], "eth0") if direction == "out"
                   else (self.bridge_ns, f"p-{name}"))
        undo = ["tc", "qdisc", "del", "dev", dev, "root"]
        for method, qdisc in (("netem loss 100%", ["netem", "loss", "100%"]),
                              ("blackhole qdisc", ["blackhole"])):
            done = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev,
                                   "root", *qdisc], capture_output=True, text=True, timeout=20)
            if done.returncode == 0:
                self.one_way_method = method
                self._cuts.setdefault(name, []).append(["netns", "exec", ns, *undo])
                return
        raise RuntimeError(f"no qdisc can drop packets one way here: {done.stderr.strip()}")

    def _run_cut(self, name: str, do: list[str], undo: list[str]) -> None:
        _ip(*do)
        self._cuts.setdefault(name, []).append(undo)

    def heal(self, name: str | None = None) -> None:
        """Undo every cut of host ``name`` (of every host when ``None``)."""
        for host in [name] if name else list(self._cuts):
            for undo in reversed(self._cuts.pop(host, [])):
                _ip(*undo)
        self._static_neighbours()  # a link taken down lost its entries

    # -- cleanup -------------------------------------------------------------

    def close(self) -> None:
        """Kill whatever still runs in our namespaces, then delete them."""
        spaces = [*self.namespaces.values(), self.bridge_ns]
        for ns in spaces:
            pids = _ip("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        deadline = time.monotonic() + 5
        for ns in spaces:
            while _ip("netns", "pids", ns, check=False).stdout.strip() and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            _ip("netns", "del", ns, check=False)
        self.namespaces.clear()
        self._cuts.clear()
