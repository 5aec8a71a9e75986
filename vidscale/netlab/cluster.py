"""N nodes on one switch: a cluster's network on one machine (docs/design.md, "A cluster on one
machine"; DESIGN §14).

    with Cluster(8, rate=Rate.parse("1gbit")) as cluster:   # 8 nodes, each link 1 Gbit/s each way
        subprocess.run(cluster.exec_prefix(3) + ["python", ...])  # runs on node 3
        cluster.shape(Rate.parse("100mbit"), node=5)        # node 5 a straggler
        cluster.set_up(2, False)                            # node 2's cable pulled

    with Cluster(8, racks=2, rate=..., trunk=Rate.parse("2gbit")):  # nodes 0-3 and 4-7 on two
        ...                                                         # switches, one trunk

Each node is a namespace `vsnet-PID-INDEX-nK` with one interface, `vsn0`, at 10.232.S.(K+1)/24.
The switch is a Linux bridge (`br0`, or `br0` and `br1` for two racks) in a namespace of its own,
`vsnet-PID-INDEX-sw`, holding the far end of every node's veth (`vsnK`). A node's link is shaped
on both ends with a token bucket (`tc ... tbf`, as `link.TwoNodeLink` does): the node's end
limits what it sends, the switch's end what it receives, so each direction carries `rate`
full duplex, as a switched port does. Two racks are two bridges joined by one veth (`trunk0`,
`trunk1`), shaped the same way to `trunk`: traffic between racks shares it (oversubscription).

With `host_port`, the host's own (root) namespace gets a port on the switch too, `vshPID`
at 10.232.S.254, unshaped: daemons that must run in the host's namespace (a scheduler's
controller) reach every node through it. S is the first third octet no address of the host's
uses, so two clusters with host ports do not overlap; without a host port the nodes' addresses
are private to their namespaces and S is 0.

Everything is undone by `close` (the context's exit, also on an exception or Ctrl-C): deleting a
namespace deletes its ends of the veths, and with them their peers, the host port included. A
harness killed before it could close leaves its namespaces behind; `link.sweep_stale` (run by
every new cluster and link) deletes those whose creating process is gone. Needs root and
iproute2 (`link.unavailable` says why not).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from vidscale.errors import InputError
from vidscale.netlab.link import PREFIX, Held, LinkError, Rate, ip, sweep_stale, tbf

MAX_NODES = 16
NODE_DEVICE = "vsn0"
_HOST_OCTET = 254
_NET = "10.232.{}."


@dataclass(frozen=True)
class Port:
    """One shaped veth: its end in namespace `a` (device `dev_a`) and in `b` (device `dev_b`)."""

    ns_a: str
    dev_a: str
    ns_b: str
    dev_b: str


class Cluster(Held):
    """`nodes` namespaces on one switch (or two racks joined by a trunk); see the module docstring.

    The attributes a job needs are the same as `TwoNodeLink`'s: `namespaces`, `devices`,
    `addresses` (one per node, node 0 first) and `exec_prefix(node)`."""

    def __init__(
        self,
        nodes: int,
        *,
        rate: Rate | None = None,
        racks: int = 1,
        trunk: Rate | None = None,
        host_port: bool = False,
        index: int = 0,
    ) -> None:
        if not 2 <= nodes <= MAX_NODES:
            raise InputError(f"nodes {nodes}: a cluster has 2 to {MAX_NODES} nodes")
        if racks not in (1, 2) or (racks == 2 and nodes < 2):
            raise InputError(f"racks {racks}: one switch, or two racks joined by a trunk")
        tag = f"{PREFIX}{os.getpid()}-{index}"
        self.size = nodes
        self.racks = racks
        self.switch = f"{tag}-sw"
        self.namespaces = tuple(f"{tag}-n{k}" for k in range(nodes))
        self.devices = tuple(NODE_DEVICE for _ in range(nodes))
        self.subnet_octet = 0
        self.addresses = self._addresses(0)
        self.host_address: str | None = None
        self.host_device: str | None = None
        self.rates: list[Rate] = [Rate(None)] * nodes
        self.trunk_rate = Rate(None)
        self._initial = (rate, trunk, host_port)
        self._made: list[str] = []

    def _addresses(self, octet: int) -> tuple[str, ...]:
        return tuple(f"{_NET.format(octet)}{k + 1}" for k in range(self.size))

    def rack_of(self, node: int) -> int:
        """The rack (bridge) node `node` hangs off: the first half on rack 0, the rest on 1."""
        return 0 if self.racks == 1 else int(node >= (self.size + 1) // 2)

    def open(self) -> None:
        """Make the switch, the nodes and their links, bring them up, shape them as asked."""
        sweep_stale()
        rate, trunk, host_port = self._initial
        for ns in (self.switch, *self.namespaces):
            ip("netns", "add", ns)
            self._made.append(ns)
        ip("-n", self.switch, "link", "set", "lo", "up")
        for rack in range(self.racks):
            ip("-n", self.switch, "link", "add", f"br{rack}", "type", "bridge")
            ip("-n", self.switch, "link", "set", f"br{rack}", "up")
        if self.racks == 2:
            self._add_trunk()
        if host_port:
            self.subnet_octet = _free_octet()
            self.addresses = self._addresses(self.subnet_octet)
        for node in range(self.size):
            self._add_node(node)
        if host_port:
            self._add_host_port()
        if rate is not None:
            self.shape(rate)
        if trunk is not None:
            self.shape_trunk(trunk)

    def _add_trunk(self) -> None:
        port = self.trunk_port()
        ip("-n", self.switch, "link", "add", port.dev_a, "type", "veth", "peer", "name", port.dev_b)
        for rack, dev in enumerate((port.dev_a, port.dev_b)):
            ip("-n", self.switch, "link", "set", dev, "master", f"br{rack}")
            ip("-n", self.switch, "link", "set", dev, "up")

    def node_port(self, node: int) -> Port:
        """Node `node`'s link: `vsn0` in its namespace, `vsn{node}` on the switch."""
        return Port(self.namespaces[node], NODE_DEVICE, self.switch, f"vsn{node}")

    def trunk_port(self) -> Port:
        return Port(self.switch, "trunk0", self.switch, "trunk1")

    def _add_node(self, node: int) -> None:
        # Made in the switch as vsn{node} / tmp, the node's end renamed once moved.
        temp = f"vsx{node}"
        port = self.node_port(node)
        ip("-n", self.switch, "link", "add", port.dev_b, "type", "veth", "peer", "name", temp)
        ip("-n", self.switch, "link", "set", temp, "netns", port.ns_a)
        ip("-n", port.ns_a, "link", "set", temp, "name", port.dev_a)
        ip("-n", port.ns_a, "addr", "add", f"{self.addresses[node]}/24", "dev", port.dev_a)
        ip("-n", port.ns_a, "link", "set", "lo", "up")
        ip("-n", port.ns_a, "link", "set", port.dev_a, "up")
        ip("-n", self.switch, "link", "set", port.dev_b, "master", f"br{self.rack_of(node)}")
        ip("-n", self.switch, "link", "set", port.dev_b, "up")

    def _add_host_port(self) -> None:
        host_dev = self.host_device = f"vsh{os.getpid() % 10_000_000}"
        ip("-n", self.switch, "link", "add", "vshost", "type", "veth", "peer", "name", host_dev)
        ip("-n", self.switch, "link", "set", host_dev, "netns", "1")
        ip("-n", self.switch, "link", "set", "vshost", "master", "br0")
        ip("-n", self.switch, "link", "set", "vshost", "up")
        self.host_address = f"{_NET.format(self.subnet_octet)}{_HOST_OCTET}"
        ip("addr", "add", f"{self.host_address}/24", "dev", host_dev)
        ip("link", "set", host_dev, "up")

    def close(self) -> None:
        """Delete the namespaces (and so every veth); safe to call more than once."""
        if self.host_device is not None:
            # Deleted here rather than left to the switch's namespace going, which the kernel
            # finishes after `ip netns del` returns.
            subprocess.run(
                ["ip", "link", "del", self.host_device], capture_output=True, check=False
            )
            self.host_device = None
        while self._made:
            ns = self._made.pop()
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)

    def exec_prefix(self, node: int) -> list[str]:
        """The command prefix that runs a program on `node`."""
        return ["ip", "netns", "exec", self.namespaces[node]]

    def shape(self, rate: Rate, *, node: int | None = None) -> None:
        """Limit node `node`'s link (every node's when None) to `rate` each way; an unshaped
        rate removes the limit."""
        for k in range(self.size) if node is None else (node,):
            port = self.node_port(k)
            tbf(port.ns_a, port.dev_a, rate, self.rates[k])
            tbf(port.ns_b, port.dev_b, rate, self.rates[k])
            self.rates[k] = rate

    def shape_trunk(self, rate: Rate) -> None:
        """Limit the trunk between the two racks to `rate` each way."""
        if self.racks != 2:
            raise LinkError("a cluster of one rack has no trunk")
        port = self.trunk_port()
        tbf(port.ns_a, port.dev_a, rate, self.trunk_rate)
        tbf(port.ns_b, port.dev_b, rate, self.trunk_rate)
        self.trunk_rate = rate

    def set_up(self, node: int, up: bool) -> None:
        """Bring node `node`'s end of its link up or down: down, the switch's end loses carrier
        too (the node's cable pulled)."""
        ip("-n", self.namespaces[node], "link", "set", NODE_DEVICE, "up" if up else "down")


def _free_octet() -> int:
    """The first third octet of 10.232.X.0/24 no address of the host's namespace is in."""
    done = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=False)
    used = {
        int(word.split(".")[2])
        for word in done.stdout.split()
        if word.startswith(_NET.format("")[:-1]) and word.count(".") == 3
    }
    free = next((octet for octet in range(256) if octet not in used), None)
    if free is None:
        raise LinkError("every 10.232.X.0/24 is in use on this host")
    return free
