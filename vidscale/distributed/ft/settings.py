"""What a fault-tolerant run needs besides its run config (docs/fault_tolerance.md).

`FTSettings` names the lighthouse, this replica group and how many groups the run has; `check`
refuses what cannot work in one line naming the flag (an `InputError`), before any process
group or thread is started: a run that waits a minute for a quorum to tell it the lighthouse is
down, or that has one group and so nothing to survive a failure with, is a configuration error.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import socket
from dataclasses import dataclass

from vidscale.errors import InputError

#: What averages the replicas every `average_every` steps (`FTSettings`).
AVERAGERS = ("aavg", "localsgd")
#: How long the lighthouse may take to accept a TCP connection before the run is refused.
LIGHTHOUSE_CONNECT_S = 5.0


@dataclass(frozen=True)
class FTSettings:
    """One replica group's view of the run.

    `lighthouse` is HOST:PORT of `torchft_lighthouse`; `group` this group's index in
    [0, groups); `min_groups` the fewest groups that may commit a step (TorchFT's
    `min_replica_size`); `timeout_s` bounds every collective, quorum and checkpoint transfer,
    so a dead peer costs the others at most that long.

    `average_every` = 0 (default): synchronous steps, gradients summed over the quorum every
    step. K > 0: local steps, and every K steps the replicas are averaged through the quorum by
    `averager`: "aavg" (parameters, BN statistics merged as AAVG Alg. 2, and the optimizer's
    moments every `moments_every` steps, a multiple of K; 0: every K, DES-LOC's separate period
    otherwise) or "localsgd" (TorchFT's own `LocalSGD`: parameters only, for comparison).

    `address`: the IP address of this node that the group's manager binds and advertises to
    the lighthouse and its peers (one group per node of a cluster: docs/design.md, "Across
    nodes"); None: TorchFT's defaults (the host's name advertised, the manager bound to every
    interface), for groups on one machine.
    """

    lighthouse: str
    group: int
    groups: int
    min_groups: int = 1
    timeout_s: float = 30.0
    average_every: int = 0
    moments_every: int = 0
    averager: str = "aavg"
    address: str | None = None

    def check(self) -> None:
        """Raise InputError naming the first flag that cannot work."""
        if self.groups < 2:
            raise InputError(
                f"--groups: {self.groups}: a fault-tolerant run needs at least 2 replica groups "
                "(one group has no peer to keep stepping or to heal from; use `vidscale train`)"
            )
        if not 0 <= self.group < self.groups:
            raise InputError(f"--group: {self.group} is not in [0, {self.groups})")
        if not 1 <= self.min_groups <= self.groups:
            raise InputError(f"--min-groups: {self.min_groups} is not in [1, {self.groups}]")
        if not self.timeout_s > 0:
            raise InputError(f"--timeout: {self.timeout_s} must be above 0 seconds")
        self.check_averaging()
        host_port(self.lighthouse)
        if self.address is not None:
            check_local_address(self.address)

    def check_averaging(self) -> None:
        k, m = self.average_every, self.moments_every
        if k < 0:
            raise InputError(f"--average-every: {k} must be 0 (synchronous steps) or a step count")
        if self.averager not in AVERAGERS:
            raise InputError(f"--averager: {self.averager!r} is not one of {', '.join(AVERAGERS)}")
        if m and (k == 0 or m % k or self.averager != "aavg"):
            raise InputError(
                f"--moments-every: {m} must be a multiple of --average-every ({k}) "
                "with --averager aavg"
            )

    @property
    def moments_period(self) -> int:
        """Steps between averagings of the optimizer's moments (AAVG)."""
        return self.moments_every or self.average_every

    @property
    def lighthouse_url(self) -> str:
        return f"http://{self.lighthouse}"


def host_port(address: str) -> tuple[str, int]:
    """HOST:PORT split; InputError naming `--lighthouse` when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--lighthouse: {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def check_local_address(address: str) -> None:
    """InputError naming `--address` unless it is an IP address of one of this node's
    interfaces (one a socket can be bound to here)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise InputError(f"--address: {address!r} is not an IP address") from None
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
    except OSError as err:
        raise InputError(
            f"--address: {address} is not an address of this node ({err.strerror or err})"
        ) from None


def require_torchft() -> None:
    """InputError in one line when the `ft` extra is not installed."""
    if importlib.util.find_spec("torchft") is None:
        raise InputError(
            "--lighthouse: fault-tolerant training needs torchft: pip install 'vidscale[ft]'"
        )


def check_lighthouse_reachable(address: str, *, timeout_s: float = LIGHTHOUSE_CONNECT_S) -> None:
    """InputError naming `--lighthouse` when nothing accepts a connection there."""
    host, port = host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as err:
        raise InputError(
            f"--lighthouse: no lighthouse reachable at {address} ({err.strerror or err}); "
            "start `torchft_lighthouse` first (docs/fault_tolerance.md)"
        ) from None
