"""The distributed environment, read once from the launcher's variables and passed down.

`torchrun --nproc_per_node N -m vidscale train ...` sets RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (so can any launcher, e.g. an `srun` wrapper);
a plain `vidscale train` sets none of them and runs as one process. The backend is chosen from
the device: NCCL for CUDA, gloo on CPU.

**One key namespace per launch of the group.** torchrun (2.5 and later) hosts the store that
the ranks rendezvous through in its agent (`TORCHELASTIC_USE_AGENT_STORE=True`) and keeps that
one store, at the same MASTER_PORT, for every restart of the worker group; torch's `env://`
rendezvous then hands each new group the bare store, on the assumption that every restart gets
a new one. The keys of the previous attempt are still there: gloo publishes each rank's
listening address under a fixed key and reads its peers' keys, so a restarted rank that looks
before its peer has overwritten its key gets the dead process's address. Which rank looks
first is a race: the group either fails with "Connection refused" or both ranks wait in
`gloo::transport::tcp::Pair::waitUntilConnected` for a connection that never comes, past the
group's timeout (measured with a minimal script, one rank SIGKILLed after an all-reduce:
7 restarts in 14 went wrong, 3 of them hung; with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, which
gives every attempt a store of its own, 8 in 8 worked).
TORCHELASTIC_RESTART_COUNT cannot name a namespace either: every agent counts its own
restarts, and on several nodes the counts differ (pytorch/pytorch#135712). `init_distributed`
therefore builds the store itself and has the ranks agree on a namespace no earlier launch
used (`_fresh_namespace`); the process group and `vidscale.distributed.peers.failure` use only keys
inside it.
"""

from __future__ import annotations

import atexit
import datetime
import math
import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist

from vidscale.errors import InputError

# Long enough for the slowest collective that legitimately waits on one rank: the other ranks
# wait in the next collective while rank 0 writes a checkpoint (seconds to a few minutes for
# the largest models on a network file system) or while the first evaluation fills the page
# cache from a large validation set. Short enough that a rank that really hangs is noticed
# within minutes rather than torch's 30 (gloo) or its NCCL default, and well inside a batch
# job's time limit. A rank that fails is noticed in seconds through `vidscale.distributed.
# failure`, not through this timeout.
DEFAULT_TIMEOUT_S = 600.0

# The one key outside a launch's namespace: rank 0's announcement of the current launch.
_LAUNCH_KEY = "vidscale/launch"
_POLL_S = 0.05


@dataclass
class DistConfig:
    """How the ranks of a multi-process run wait on each other (the `dist` config section)."""

    # Seconds a rank waits in one collective or in joining the process group before failing.
    timeout_s: float = DEFAULT_TIMEOUT_S
    # How the ranks share training: a name registered in `vidscale.distributed.strategy`
    # (checked against the registry by the run config's validation). The default, DDP's
    # registered name, all-reduces gradients every step.
    strategy: str = "ddp"
    # The process group's backend: auto = NCCL for CUDA processes, gloo on CPU. gloo also
    # runs CUDA processes (slower collectives), e.g. several processes sharing one GPU, which
    # NCCL refuses.
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    # Seconds a rank may go without a word from a ring neighbour (its heartbeat through the
    # launch's store) or from the store itself before it declares the other lost and the run
    # stops (`distributed.peers.failure`): a link that goes down kills no process, and without this
    # the ranks would wait for `timeout_s`.
    peer_silence_s: float = 30.0

    def validate(self) -> None:
        if self.backend not in ("auto", "nccl", "gloo"):
            raise ValueError(f"backend must be 'auto', 'nccl' or 'gloo', got {self.backend!r}")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(f"timeout_s must be a finite number > 0, got {self.timeout_s}")
        if not (self.peer_silence_s > 0 and math.isfinite(self.peer_silence_s)):
            raise ValueError(
                f"peer_silence_s must be a finite number > 0, got {self.peer_silence_s}"
            )


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@dataclass(frozen=True)
class GroupStore:
    """Where this launch's keys live: the store's address and the launch's namespace in it.

    `in_agent`: torchrun's agent hosts the store, which then outlives the ranks; otherwise
    rank 0 hosts it and it ends with rank 0's process (`hosted_here` on rank 0).
    """

    host: str
    port: int
    namespace: str
    in_agent: bool
    hosted_here: bool
    timeout_s: float

    def connect(self, *, timeout_s: float | None = None) -> dist.Store:
        """A new client connection to the store, seeing only this launch's keys."""
        client = dist.TCPStore(
            self.host,
            self.port,
            None,
            False,
            datetime.timedelta(seconds=timeout_s or self.timeout_s),
            wait_for_workers=False,
        )
        return dist.PrefixStore(self.namespace, client)


_group_store: GroupStore | None = None


def group_store() -> GroupStore | None:
    """This launch's store, once `init_distributed` joined a group of several processes."""
    return _group_store


def _pick_device(preference: Literal["auto", "cpu", "cuda"], local_rank: int) -> torch.device:
    if preference == "cuda" and not torch.cuda.is_available():
        raise InputError("train.device=cuda but no CUDA device is available")
    if preference in ("auto", "cuda") and torch.cuda.is_available():
        count = torch.cuda.device_count()
        return torch.device("cuda", local_rank % count)
    return torch.device("cpu")


def init_distributed(
    device: Literal["auto", "cpu", "cuda"] = "auto",
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    backend: Literal["auto", "nccl", "gloo"] = "auto",
) -> DistEnv:
    """Join the default process group when launched as several processes; no-op on one.

    `backend` "auto" is NCCL for a CUDA device and gloo on CPU; "nccl" needs a CUDA device.
    Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT. Every
    launch of the group (a torchrun restart included) gets keys of its own in the store (see
    the module docstring). Raises ValueError for a device or backend this process cannot have
    (no CUDA), TimeoutError if the other ranks do not arrive within
    `timeout_s`, which is also the timeout of every collective.
    """
    global _group_store
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    dev = _pick_device(device, local_rank)
    if backend == "nccl" and dev.type != "cuda":
        raise InputError("dist.backend=nccl needs CUDA devices, and this process has none")
    if backend == "auto":
        backend = "nccl" if dev.type == "cuda" else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world_size > 1 and not dist.is_initialized():
        timeout = datetime.timedelta(seconds=timeout_s)
        try:
            host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        except KeyError as err:
            raise RuntimeError(f"WORLD_SIZE={world_size} but {err.args[0]} is not set") from err
        # torch's own test (torch.distributed.rendezvous): the agent hosts the store at
        # MASTER_PORT; otherwise rank 0 hosts it, as `env://` does.
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
        hosted_here = rank == 0 and not agent_store
        store = dist.TCPStore(
            host, port, world_size, hosted_here, timeout, multi_tenant=hosted_here
        )
        namespace = _fresh_namespace(store, rank=rank, world_size=world_size, timeout_s=timeout_s)
        dist.init_process_group(
            backend=backend,
            store=dist.PrefixStore(namespace, store),
            rank=rank,
            world_size=world_size,
            timeout=timeout,
            # NCCL only: a group bound to a device makes its subgroups by splitting it, which
            # gloo cannot (torch 2.11: no perform_nocolor_split), so gloo stays unbound.
            device_id=dev if backend == "nccl" else None,
        )
        _group_store = GroupStore(host, port, namespace, agent_store, hosted_here, timeout_s)
        _leave_at_exit()
    return DistEnv(rank, local_rank, world_size, local_world, dev, backend)


def _fresh_namespace(store: dist.Store, *, rank: int, world_size: int, timeout_s: float) -> str:
    """A key prefix that every rank of this launch agrees on and no earlier launch used.

    Rank 0 announces a new random token under `_LAUNCH_KEY`. A rank cannot tell that token
    from the previous launch's, so it joins under the token it read with a random nonce of its
    own, and rank 0 answers under a key that names the token and that nonce: an answer that
    exists is fresh by construction. A rank that read the previous launch's token gets no
    answer, reads the key again and joins the new token. Rank 0 waits for every rank's join
    under its own token, so no earlier launch's keys can stand in for one.
    """
    # Every wait here polls: a `store.wait` that times out leaves the client connection
    # expecting the server's late reply.
    deadline = time.monotonic() + timeout_s
    if rank == 0:
        token = uuid.uuid4().hex
        store.set(_LAUNCH_KEY, token)
        joins = [f"vidscale/{token}/join/{r}" for r in range(1, world_size)]
        while not store.check(joins):
            if time.monotonic() > deadline:
                missing = [r for r, key in enumerate(joins, start=1) if not store.check([key])]
                raise TimeoutError(
                    f"ranks {missing} did not join the process group within {timeout_s:g} s"
                )
            time.sleep(_POLL_S)
        nonces = [n.decode() for n in store.multi_get(joins)]
        for r, nonce in enumerate(nonces, start=1):
            store.set(f"vidscale/{token}/welcome/{r}/{nonce}", token)
        return f"vidscale/{token}"
    nonce = uuid.uuid4().hex
    joined = ""
    while True:
        token = store.get(_LAUNCH_KEY).decode()  # waits (up to the store's timeout) for rank 0
        if token != joined:
            store.set(f"vidscale/{token}/join/{rank}", nonce)
            joined = token
        if store.check([f"vidscale/{token}/welcome/{rank}/{nonce}"]):
            return f"vidscale/{token}"
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank 0 did not answer rank {rank} within {timeout_s:g} s")
        time.sleep(_POLL_S)


# Every default group this process has joined, kept until the process exits (see `shutdown`).
_retired_groups: list[object] = []
# How long the exit waits for gloo's threads to drop their references to a retired group: they
# do within milliseconds of a collective's end; a group still held after a failure (its
# traceback, a collective that never ended) is left as before rather than delay the exit.
_RELEASE_WAIT_S = 2.0


def _release_retired_groups() -> None:
    """Destroy the retired groups on the main thread before the interpreter finalizes.

    A group left to finalization is destroyed with the interpreter half torn down: a gloo
    worker thread that then needs the GIL (to drop a tensor's Python reference) is ended by
    Python's `pthread_exit`, whose forced unwind through torch's C++ frames aborts the process
    ("terminate called without an active exception", SIGABRT, seen once in a CI run as a worker
    dying at the end of a resumed 2-process run; torch's own report: pytorch/pytorch#179291).
    Here the interpreter is whole and this is the main thread. A group is released only once
    this list holds its last reference (the reason it is kept, see `shutdown`); one still held
    elsewhere after `_RELEASE_WAIT_S` is left as before.
    """
    deadline = time.monotonic() + _RELEASE_WAIT_S
    while _retired_groups:
        # 3 when only the list holds it: the list, the loop's name, getrefcount's argument.
        held = [g for g in _retired_groups if sys.getrefcount(g) > 3]
        if not held or time.monotonic() > deadline:
            _retired_groups[:] = held  # the rest are destroyed here, on this thread
            return
        time.sleep(0.01)


atexit.register(_release_retired_groups)

_leaving_at_exit = False


def _leave_at_exit() -> None:
    """Have the process leave its group as it exits, whether or not its code calls `shutdown`.

    A process that exits with its gloo group alive can abort as the interpreter finalizes
    ("terminate called without an active exception": a stand-in rank that never called
    `shutdown` failed 2 of 7 two-node passes so). Registered after `_release_retired_groups`,
    this runs before it (atexit runs last-registered first): the group is retired, then
    destroyed on the main thread. A no-op for a process that already left (`vidscale`'s
    commands leave in their `finally`).
    """
    global _leaving_at_exit
    if not _leaving_at_exit:
        atexit.register(shutdown)
        _leaving_at_exit = True


def shutdown() -> None:
    """Leave the default process group (no-op when not in one).

    The group object is retired, not dropped. Gloo completes a collective's future on one of
    the group's worker threads and runs its callbacks there; a callback that holds the group
    (torch's PowerSGD hook captures it in the closures it chains) is released on that thread
    only after the future it completes is marked done, i.e. possibly after the training thread
    has gone on to destroy the group. If that release dropped the last reference, the group's
    destructor would run on its own worker thread and join it: `std::system_error: Resource
    deadlock avoided`, and the process aborts. Keeping a reference here makes the training
    thread's exit the last owner (measured: init/PowerSGD steps/destroy cycles on 2 gloo ranks
    aborted within 5 cycles in 6 of 6 tries without it, none in 800 with it).
    """
    global _group_store
    if dist.is_initialized():
        _retired_groups.append(dist.group.WORLD)
        dist.destroy_process_group()
    _group_store = None
