"""A real multi-node SLURM cluster on one machine: one `slurmd` per node namespace of a
`vidscale.netlab.cluster.Cluster`, the controller and munged in the host's namespace.

DESIGN §14 ("SLURM across namespaces"): node K is `NodeName=nodeK NodeAddr=<its address>`, its
`slurmd -N nodeK` started with `nsenter --net=/run/netns/NAME` (not `ip netns exec`, which
remounts /sys and hides the cgroup tree); `slurmctld` listens in the host's namespace and the
nodes reach it through the switch's host port (`Cluster(host_port=True)`); one munged, its socket
a file every daemon names (`AuthInfo=socket=...`). A requeued job may start again only once its
previous credential has expired: `cred_expire=30` keeps that wait short. Every node shares this
machine's CPUs; `LocalSlurm.stop` stops the node daemons before the controller and munged.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.cluster.local_slurm import LocalSlurm, _memory_mib, free_port
from vidscale.netlab.cluster import Cluster

CRED_EXPIRE_S = 30


class NamespaceSlurm(LocalSlurm):
    """One controller in the host's namespace and a compute node in each of `network`'s."""

    def __init__(self, root: Path, network: Cluster) -> None:
        super().__init__(root)
        if network.host_address is None:
            raise ValueError("the cluster needs a host port (Cluster(host_port=True))")
        self.network = network
        self.node_names = [f"node{k}" for k in range(network.size)]

    def start(self) -> None:
        for d in ("state", "spool", "log"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._start_munged()
        self.conf.write_text(self._slurm_conf())
        self._run_daemon("slurmctld", "-i")
        for k, name in enumerate(self.node_names):
            netns = f"--net=/run/netns/{self.network.namespaces[k]}"
            self._run_daemon(
                "slurmd", "-N", name, prefix=("nsenter", netns), pid_name=f"slurmd.{name}"
            )
        self._wait_for_idle_node()

    def node_address(self, node: int) -> str:
        return self.network.addresses[node]

    def _slurm_conf(self) -> str:
        r = self.root
        cpus = os.cpu_count() or 1
        memory = max(512, _memory_mib() // self.network.size)
        nodes = "\n".join(
            f"NodeName={name} NodeAddr={self.network.addresses[k]} CPUs={cpus} "
            f"RealMemory={memory} State=UNKNOWN"
            for k, name in enumerate(self.node_names)
        )
        return f"""\
ClusterName=vidscale-nodes
SlurmctldHost={self.host}({self.network.host_address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r / "munge.sock"},cred_expire={CRED_EXPIRE_S}
CryptoType=crypto/munge
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}/%n
SlurmctldPidFile={r / "slurmctld.pid"}
SlurmdPidFile={r}/slurmd.%n.pid
SlurmctldLogFile={r / "log" / "slurmctld.log"}
SlurmdLogFile={r / "log"}/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
KillWait=30
MinJobAge=600
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def torch_processes(slurm: LocalSlurm, tag: str) -> list[int]:
    """The torchrun agents and training ranks of the job tagged `tag` (not its batch shell, nor
    srun, whose arguments name torchrun too, nor SLURM's step daemons)."""
    found = []
    for pid in slurm.job_processes(VIDSCALE_TEST_TAG=tag):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        agent = any(arg == b"torchrun" or arg.endswith(b"/torchrun") for arg in argv[:2])
        if agent or argv[1:4] == [b"-m", b"vidscale", b"train"]:
            found.append(pid)
    return found
