"""What `bench cluster` measures (`ClusterConfig`): node counts, link rates, models, variants,
and the straggler case; where its one-node inputs come from (`baseline`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from vidscale.errors import InputError
from vidscale.netlab.cluster import MAX_NODES
from vidscale.netlab.link import Rate

DEFAULT_BASELINE = Path("docs/results/network_scaling.json")


@dataclass(frozen=True)
class ClipShape:
    """The clips a baseline's one-node steps were measured on (its JSON's `settings`)."""

    batch: int
    frames: int
    size: int
    num_classes: int

    @classmethod
    def of(cls, settings: dict[str, Any]) -> ClipShape:
        """The shape from a baseline's `settings`; its other entries are not the shape's."""
        return cls(**{f.name: int(settings[f.name]) for f in fields(cls)})


@dataclass(frozen=True)
class ClusterConfig:
    """Nodes, rates and models of the sweep; one stand-in rank per node. `baseline` is a
    `bench network` JSON measured on this machine: its one-process steps (`one_process_step_s`)
    and hooks' compute (`hook_compute_s`) are the stand-in's compute and the planner's, its
    unshaped link's all-reduce bandwidth the planner's `cpu_s_per_byte`. The clip shape must
    be the baseline's. `straggler_*`: one more run at `straggler_nodes` and the first rate
    with node 1's link at `straggler_rate`, and one with its compute `straggler_factor` times
    as long (DDP without a hook and AAVG at `aavg_k`, the first model)."""

    nodes: tuple[int, ...] = (2, 4, 8, 16)
    rates: tuple[str, ...] = ("2gbit", "500mbit")
    models: tuple[str, ...] = ("tsm_resnet50", "i3d_resnet50_3x3x3")
    hooks: tuple[str, ...] = ("none", "bf16", "powersgd")
    aavg_k: int = 4
    epoch_k: int = 16
    steps: int = 4
    warmup: int = 2
    bucket_cap_mb: float = 25.0
    baseline: Path = DEFAULT_BASELINE
    straggler_nodes: int = 0  # 0: no straggler runs
    straggler_rate: str = "100mbit"
    straggler_factor: float = 1.5
    cores: int = 2  # the cores the nodes' agents are pinned over (node K on core K mod cores)

    def check(self) -> None:
        """An `InputError` naming the first bad setting."""
        for n in self.nodes:
            if not 2 <= n <= MAX_NODES:
                raise InputError(f"nodes: {n} is not 2 to {MAX_NODES}")
        if not self.rates or not self.models or not self.nodes:
            raise InputError("nodes, rates, models: name at least one of each")
        for rate in (*self.rates, self.straggler_rate):
            Rate.parse(rate)
        for hook in self.hooks:
            if hook not in ("none", "bf16", "powersgd"):
                raise InputError(f"hooks: {hook!r} is not none, bf16 or powersgd")
        if self.epoch_k and self.epoch_k % self.aavg_k:
            raise InputError(f"epoch_k: a multiple of aavg_k ({self.aavg_k}), got {self.epoch_k}")
        if self.straggler_nodes and not 2 <= self.straggler_nodes <= MAX_NODES:
            raise InputError(f"straggler_nodes: {self.straggler_nodes} is not 2 to {MAX_NODES}")
        if not self.baseline.is_file():
            raise InputError(f"baseline: {self.baseline} is not a file (a bench network JSON)")
        baseline = self.read_baseline()
        for model in self.models:
            if model not in baseline["one_process_step_s"]:
                raise InputError(f"models: {model} is not in {self.baseline}")

    def read_baseline(self) -> dict[str, Any]:
        try:
            found: dict[str, Any] = json.loads(self.baseline.read_text())
            for key in ("one_process_step_s", "hook_compute_s", "links", "settings"):
                found[key]
        except (ValueError, KeyError) as err:
            raise InputError(
                f"baseline: {self.baseline} is not a bench network JSON ({err})"
            ) from None
        return found

    def variants(self) -> list[tuple[str, str, int]]:
        """(strategy, hook, k) of every pass at one node count, AAVG per epoch last."""
        out = [("ddp", hook, 0) for hook in self.hooks]
        out.append(("aavg", "none", self.aavg_k))
        if self.epoch_k:
            out.append(("aavg", "none", self.epoch_k))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "baseline": str(self.baseline)}
