"""AAVG: K-step model averaging with adaptive batch size (Cong et al., §III-IV; DESIGN §6).

`AAVGStrategy` is the `aavg` data-parallel strategy: every learner (rank) takes local optimizer
steps on its own data with no gradient all-reduce, and every K steps all replicas are replaced
by their mean (Alg. 1 line 12) in one flat all-reduce per dtype (`average_replicas`: parameters,
optimizer state and BatchNorm statistics merged as Alg. 2). With K = 1, SGD and merged
optimizer state this is synchronous SGD: averaging the weights and momenta after each local step
equals stepping once with the averaged gradient (§III-A: "equivalent to hard-sync").

The replicas are also averaged at the end of every epoch (K = -1: only then), so evaluation
and epoch checkpoints see the averaged model w~ of Alg. 1 line 14. A checkpoint between
averagings (a stop signal, `train.checkpoint_every_steps`) averages a copy for the run's
checkpoint and keeps each rank's own replica in its per-rank file, so the run continues exactly
as it would have, and a resumed run too. The per-step agreement of the loop (loss, stop,
finiteness; a few bytes) still crosses the network every step and is not counted here.

Its configuration (the `aavg` section) is also read by the adaptive batch size rule
(`vidscale.train.phases.adaptive_batch`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from vidscale.distributed.aavg.averaging import FlatBuffers, average_replicas
from vidscale.distributed.aavg.config import AAVGConfig
from vidscale.distributed.env import DistEnv
from vidscale.distributed.parallel import DataParallel, register_strategy
from vidscale.distributed.sync.comm_hooks import Mark, mark, seconds_between
from vidscale.distributed.traffic import Traffic

if TYPE_CHECKING:
    from vidscale.distributed.sync.comm_hooks import CommConfig


@register_strategy("aavg")
class AAVGStrategy(DataParallel):
    """K-step model averaging (see the module docstring); `cfg.k` = -1: at epoch ends only."""

    log_each_round = True
    fresh_start = "the replicas restart from the checkpoint's averaged model"

    def __init__(self, env: DistEnv, cfg: AAVGConfig) -> None:
        self.env, self.cfg = env, cfg
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._in_sync = True  # no local step since the last averaging
        # Averagings not yet taken: start and end marks, bytes sent, rounds.
        self._timed: list[tuple[Mark, Mark, int, int]] = []
        self._buffers = FlatBuffers()  # the averaging's all-reduce buffer, kept between rounds
        # One process has nothing to average and no per-rank state.
        self.per_rank = env.distributed

    @classmethod
    def from_config(cls, env: DistEnv, *, comm: CommConfig, aavg: AAVGConfig) -> AAVGStrategy:
        return cls(env, aavg)

    def wrap(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        self._model, self._optimizer = model, optimizer
        return model

    def micro_batch(self, *, last: bool) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # local steps: gradients never leave the rank

    def after_step(self, *, step_in_epoch: int, epoch_end: bool) -> None:
        if not self.env.distributed:
            return
        self._in_sync = False
        k = self.cfg.k
        if epoch_end or (k > 0 and step_in_epoch % k == 0):
            self._average()

    @contextlib.contextmanager
    def consensus(self) -> Iterator[None]:
        """Between averagings: average, run the body, then give each rank its replica back."""
        if self._in_sync:
            yield
            return
        model, optimizer = self._parts()
        own_model = {k: v.clone() for k, v in model.state_dict().items()}
        own_optimizer = copy.deepcopy(optimizer.state_dict())
        self._average(of_the_algorithm=False)
        try:
            yield
        finally:
            model.load_state_dict(own_model)
            optimizer.load_state_dict(own_optimizer)
            self._in_sync = False

    def take_traffic(self) -> Traffic:
        timed, self._timed = self._timed, []
        traffic = Traffic()
        for start, end, sent, rounds in timed:
            seconds = seconds_between(start, end)
            traffic += Traffic(sent, seconds, rounds, exposed_seconds=seconds)
        return traffic

    def state_dict(self) -> dict[str, Any]:
        """This rank's replica when it differs from the averaged model the checkpoint holds."""
        model, optimizer = self._parts()
        state: dict[str, Any] = {"world_size": self.env.world_size, "in_sync": self._in_sync}
        if not self._in_sync:
            state["model"] = model.state_dict()
        if not self._in_sync or not self.cfg.merge_optimizer_state:
            state["optimizer"] = optimizer.state_dict()  # per learner unless merged
        return state

    def incompatibility(self, state: dict[str, Any]) -> str | None:
        saved = state.get("world_size")
        if saved != self.env.world_size:
            return f"it holds the replicas of {saved} learners, this run has {self.env.world_size}"
        if not state.get("in_sync", True) and "model" not in state:
            return "it lacks this learner's replica"
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        problem = self.incompatibility(state)
        if problem is not None:
            raise ValueError(f"cannot restore this learner's replica: {problem}")
        model, optimizer = self._parts()
        if "model" in state:
            model.load_state_dict(state["model"])
        if "optimizer" in state:
            optimizer.load_state_dict(state["optimizer"])
        self._in_sync = bool(state["in_sync"])

    def _average(self, *, of_the_algorithm: bool = True) -> None:
        """Average the replicas. Traffic is always counted; only the algorithm's averagings
        (not a checkpoint's, of a copy) count as rounds. The averaging blocks the step, so all
        of its time is exposed (`Traffic.exposed_seconds`); on CUDA it is timed by events on
        the device's stream, as the gradient hooks are (`comm_hooks.mark`), without a host wait
        here."""
        model, optimizer = self._parts()
        start = mark(self.env.device)
        stats = average_replicas(
            model,
            optimizer,
            merge_optimizer_state=self.cfg.merge_optimizer_state,
            merge_bn=self.cfg.merge_bn,
            buffers=self._buffers,
        )
        self._timed.append((start, mark(self.env.device), stats.bytes_sent, int(of_the_algorithm)))
        self._in_sync = True

    def _parts(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        if self._model is None or self._optimizer is None:
            raise RuntimeError("AAVGStrategy.wrap(model, optimizer) must be called first")
        return self._model, self._optimizer
