"""Two network namespaces joined by a veth pair: two "nodes" with a real link between them.

    with TwoNodeLink() as link:
        link.shape(Rate.parse("500mbit"))  # tc tbf on both ends: 500 Mbit/s each way
        subprocess.run(link.exec_prefix(0) + ["python", ...])  # runs on node 0
        link.set_up(False)                 # the cable pulled (both ends lose carrier)

Node 0 lives in namespace `vsnet-PID-0` with address 10.231.0.1 on its end of the veth, node 1
in `vsnet-PID-1` with 10.231.0.2; each has its own loopback. The addresses are private to the
two namespaces (a namespace has its own routing table), so several links can exist at once
and none touches the host's network. Shaping is a token bucket (`tc qdisc ... tbf`) on the
egress of each end: the link carries `rate` bits per second in each direction, full duplex,
as a switched Ethernet port does. Delay is not shaped (the kernels this runs on lack `netem`).

Everything is undone by `close` (the context's exit, also on an exception or Ctrl-C; on SIGTERM
inside `ending_on_sigterm`): deleting a namespace deletes its end of the veth, and with it the
pair. A process killed before it could close leaves its namespaces behind; `sweep_stale` (run by every new link) deletes those whose
creating process is gone. Needs root (CAP_NET_ADMIN) and iproute2; `unavailable()` says why
not where either is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

from vidscale.errors import InputError

PREFIX = "vsnet-"
SUBNET = "10.231.0.{}/30"
# vsnet-PID-INDEX-NODE: a two-node link's (NODE 0 or 1) and a cluster's (nK, sw).
_NAME = re.compile(rf"^{PREFIX}(\d+)-\d+-(?:[01]|n\d+|sw)$")
# tbf needs a bucket of at least one MTU-sized packet per timer tick; this many seconds of
# traffic at the link's rate (and never less than 64 KiB) keeps it from capping the rate below
# the one set at any rate used here (checked by the suite's throughput test).
_BURST_S = 0.004
_MIN_BURST = 64 * 1024


class LinkError(RuntimeError):
    """An `ip` or `tc` command failed (its message says which and why)."""


class Held(ABC):
    """Held up inside a `with` block: `open()` on entry (a failed open closes what it made),
    `close()` on exit, whatever ends the block."""

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True)
class Rate:
    """A link rate in bits per second; None is an unshaped link (the veth's own speed)."""

    bits_per_s: float | None

    @classmethod
    def parse(cls, text: str) -> Rate:
        """ "unshaped", or a number with a unit: 100mbit, 2gbit, 500Mbit, 1.5gbit, 800kbit."""
        word = text.strip().lower()
        if word in ("unshaped", "none", "inf"):
            return cls(None)
        found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)bit", word)
        if found is None or float(found.group(1)) <= 0:
            raise InputError(f"link rate {text!r}: a rate such as 100mbit, 2gbit, or unshaped")
        scale = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}[found.group(2)]
        return cls(float(found.group(1)) * scale)

    @property
    def label(self) -> str:
        if self.bits_per_s is None:
            return "unshaped"
        for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
            if self.bits_per_s >= scale:
                return f"{self.bits_per_s / scale:g}{unit}"
        return f"{self.bits_per_s:g}bit"

    @property
    def bytes_per_s(self) -> float:
        """Bytes per second each way (infinite when unshaped)."""
        return float("inf") if self.bits_per_s is None else self.bits_per_s / 8

    def burst_bytes(self) -> int:
        if self.bits_per_s is None:
            return 0
        return max(_MIN_BURST, int(self.bits_per_s / 8 * _BURST_S))


class Network(Protocol):
    """Nodes a job can run on: node K is namespace `namespaces[K]`, its interface `devices[K]`
    at `addresses[K]`; `exec_prefix(K)` runs a program there."""

    @property
    def namespaces(self) -> tuple[str, ...]: ...

    @property
    def devices(self) -> tuple[str, ...]: ...

    @property
    def addresses(self) -> tuple[str, ...]: ...

    def exec_prefix(self, node: int) -> list[str]: ...


def unavailable() -> str | None:
    """Why two namespaces cannot be made here, or None when they can (tried for real)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2) is not installed"
    try:
        with TwoNodeLink():
            pass
    except LinkError as err:
        return f"a veth between two namespaces cannot be made here: {err}"
    return None


def ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode:
        raise LinkError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")


def tbf(namespace: str, device: str, rate: Rate, previous: Rate) -> None:
    """Limit what `device` (in `namespace`) sends to `rate` with a token bucket; an unshaped
    rate removes the limit `previous` set (if any)."""
    if rate.bits_per_s is None:
        if previous.bits_per_s is not None:
            _tc(namespace, "qdisc", "del", "dev", device, "root")
        return
    _tc(
        namespace,
        *("qdisc", "replace", "dev", device, "root", "tbf"),
        *("rate", f"{int(rate.bits_per_s)}bit"),
        *("burst", str(rate.burst_bytes()), "latency", "100ms"),
    )


def _tc(namespace: str, *args: str) -> None:
    done = subprocess.run(
        ["tc", "-n", namespace, *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise LinkError(f"tc {' '.join(args)}: {done.stderr.strip() or done.returncode}")


def namespaces() -> list[str]:
    """The names of this host's network namespaces (`ip netns list`)."""
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def ending_on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM raises `SystemExit(143)`: it unwinds through the jobs' and the
    links' `finally` blocks (namespaces, veths, agents torn down) where the default action
    would end the process at once and leave them behind."""

    def end(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, end)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def sweep_stale() -> list[str]:
    """Delete the namespaces of links whose creating process is gone; their names."""
    removed = []
    for name in namespaces():
        found = _NAME.match(name)
        if found is not None and not _alive(int(found.group(1))):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            removed.append(name)
    return removed


class TwoNodeLink(Held):
    """Two namespaces and the veth between them (see the module docstring)."""

    def __init__(self, *, index: int = 0) -> None:
        tag = f"{os.getpid()}-{index}"
        self.namespaces = (f"{PREFIX}{tag}-0", f"{PREFIX}{tag}-1")
        # Interface names are at most 15 characters; each lives in its own namespace.
        self.devices = ("vsnet0", "vsnet1")
        self.addresses = (SUBNET.format(1).split("/")[0], SUBNET.format(2).split("/")[0])
        self.rate = Rate(None)
        self._made: list[str] = []

    def open(self) -> None:
        """Make the namespaces, the veth between them, its addresses; bring it all up."""
        sweep_stale()
        for ns in self.namespaces:
            ip("netns", "add", ns)
            self._made.append(ns)
        temp = (f"vst{os.getpid() % 100000}a", f"vst{os.getpid() % 100000}b")
        ip("link", "add", temp[0], "type", "veth", "peer", "name", temp[1])
        for node in (0, 1):
            ns, dev = self.namespaces[node], self.devices[node]
            ip("link", "set", temp[node], "netns", ns)
            ip("-n", ns, "link", "set", temp[node], "name", dev)
            ip("-n", ns, "addr", "add", SUBNET.format(node + 1), "dev", dev)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "set", dev, "up")

    def close(self) -> None:
        """Delete the namespaces (and so the veth); safe to call more than once."""
        while self._made:
            ns = self._made.pop()
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)

    def exec_prefix(self, node: int) -> list[str]:
        """The command prefix that runs a program on `node` (0 or 1)."""
        return ["ip", "netns", "exec", self.namespaces[node]]

    def shape(self, rate: Rate) -> None:
        """Limit both directions to `rate` (a token bucket on each end's egress); an unshaped
        rate removes the limit."""
        for node in (0, 1):
            tbf(self.namespaces[node], self.devices[node], rate, self.rate)
        self.rate = rate

    def set_up(self, up: bool) -> None:
        """Bring node 0's end up or down: down, neither end has carrier (a pulled cable)."""
        ip("-n", self.namespaces[0], "link", "set", self.devices[0], "up" if up else "down")
