"""The gradient communication settings (`CommConfig`) and the handle of a hook attached to DDP
(`CommHook`): its traffic and its checkpointable state. `comm_hooks.attach_comm_hook` makes one;
PowerSGD's handle (`powersgd_hook.PowerSGDHook`) adds per-parameter state."""

from dataclasses import dataclass
from typing import Any, Literal

from vidscale.distributed.sync.comm_timing import TrafficMeter
from vidscale.distributed.traffic import Traffic

HookName = Literal["none", "fp16", "bf16", "powersgd"]


@dataclass
class CommConfig:
    """How gradients cross the network (`--set comm.hook=bf16`)."""

    hook: HookName = "none"
    bucket_cap_mb: float = 25.0
    powersgd_rank: int = 2
    powersgd_start_step: int = 10  # plain all-reduce for the first steps (PowerSGD paper §4)

    def validate(self) -> None:
        if self.bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {self.bucket_cap_mb}")
        if self.powersgd_rank < 1:
            raise ValueError(f"powersgd_rank must be >= 1, got {self.powersgd_rank}")
        if self.powersgd_start_step < 2:
            # torch requires at least 2 warm-up iterations to build its buckets.
            raise ValueError(f"powersgd_start_step must be >= 2, got {self.powersgd_start_step}")


# When something happened: perf_counter seconds on the host, or an event on a CUDA stream.


class CommHook:
    """The hook attached to a DDP model: its traffic (`take`) and the hook's state.

    The state round-trips through a checkpoint: `state_dict()` holds tensors, numbers and plain
    containers only (it loads with `torch.load(weights_only=True)`), and `load_state_dict()`
    restores it into a freshly built DDP model and hook before their first step, so a resumed
    run computes the same gradients as an uninterrupted one. DDP's native all-reduce and the
    fp16/bf16 casts keep no state: their `state_dict()` is `{}`.
    """

    #: Whether the state differs between ranks, so that every rank saves and loads its own.
    per_rank: bool = False

    def __init__(self, hook: HookName, meter: TrafficMeter) -> None:
        self.hook = hook
        self._meter = meter

    def take(self) -> Traffic:
        """This rank's gradient all-reduces since the last call (see `TrafficMeter`).

        `bytes_sent`: bytes put into the all-reduces; `seconds`: time during which at least
        one was in flight (it overlaps the backward pass); `rounds`: synchronised steps.
        All zero without DDP and between calls with no synchronised step.
        """
        return self._meter.take()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def incompatibility(self, state: dict[str, Any]) -> str | None:
        """Why `state` cannot be loaded into this hook, or None when it can."""
        if state:
            saved_by = state.get("hook")
            return f"it was saved by comm.hook={saved_by!r}; this run's hook ({self.hook!r}) has no state"
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state`; raise ValueError (and change nothing) when it does not fit."""
        problem = self.incompatibility(state)
        if problem is not None:
            raise ValueError(f"cannot restore the gradient communication state: {problem}")
