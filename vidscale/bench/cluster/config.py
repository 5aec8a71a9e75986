"""What `bench cluster` measures (`ClusterConfig`): node counts, link rates, models, variants,
and the straggler case; where its one-node inputs come from (`baseline`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from vidscale.bench import options
from vidscale.bench.options import option
from vidscale.errors import InputError
from vidscale.netlab.cluster import MAX_NODES
from vidscale.netlab.link import Rate

DEFAULT_BASELINE = Path("docs/results/network_scaling.json")
STANDIN_HOOKS = ("none", "bf16", "powersgd")  # the DDP hooks a stand-in rank registers
# Which of the baseline's one-node steps a stand-in waits: one process alone (a cluster's node,
# which has memory of its own); one with a second computing beside it on this machine; or the
# compute of two nodes in lockstep on it, which is what each node of `bench network`'s two-node
# rows computed (for the check against those rows); or, per rate, the compute of that rate's
# real two-node AAVG rows that average once in the baseline's epoch: what the real ranks
# computed in that very pass, on a machine whose speed drifts from one minute to the next.
STANDIN_COMPUTE = ("one_process", "co_running", "lockstep", "in_pass")


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
    as long (DDP without a hook and AAVG at `aavg_k`, the first model). `trunk_*`: the same
    two variants at `trunk_nodes` and the first rate on two racks (the first half of the
    nodes and the rest) joined by one trunk, once per `trunk_rates` (oversubscription, as a
    cluster's racks have). Every field is a flag of `vidscale bench cluster` (`bench.options`,
    `cli.flags`)."""

    nodes: tuple[int, ...] = option((2, 4, 8, 16), help=f"node counts, 2 to {MAX_NODES}", low=2)
    rates: tuple[str, ...] = option(("2gbit", "500mbit"), help="each node's link rate")
    models: tuple[str, ...] = option(
        ("tsm_resnet50", "i3d_resnet50_3x3x3"), help="registered models, each in --baseline"
    )
    hooks: tuple[str, ...] = option(
        ("none", "bf16", "powersgd"), help="DDP gradient hooks", choices=STANDIN_HOOKS
    )
    aavg_k: int = option(4, help="AAVG: steps per averaging", low=1)
    epoch_k: int = option(16, help="AAVG's 'an epoch' in steps (0: skip that pass)", low=0)
    steps: int = options.steps(4, help="measured steps per pass")
    warmup: int = options.warmup(2)
    bucket_cap_mb: float = option(25.0, help="DDP bucket size in MB", above=0)
    baseline: Path = option(
        DEFAULT_BASELINE, help="a bench network JSON: the one-node steps the stand-ins wait"
    )
    straggler_nodes: int = option(
        0, help="node count of the straggler runs (0: no straggler runs)", low=0
    )
    straggler_rate: str = option("100mbit", help="the straggler's link rate")
    straggler_factor: float = option(1.5, help="the straggler's compute, times a node's", low=1)
    trunk_nodes: int = option(
        0, help="node count of the two-rack runs (0: no two-rack runs)", low=0
    )
    trunk_rates: tuple[str, ...] = option(
        ("1gbit",), help="the rates of the trunk joining the two racks, one run each"
    )
    cores: int = option(
        2, help="cores the nodes' agents are pinned over (node K on K mod it)", low=1
    )
    standin_compute: str = option(
        "one_process",
        help="the baseline's step the stand-ins wait: one_process (a node alone, as on a "
        "cluster), co_running (with a second process beside it), lockstep (two nodes "
        "computing in step, as bench network's two-node rows do: for --check-against) or "
        "in_pass (per rate, the compute of that rate's real two-node AAVG rows that average "
        "once an epoch: for --check-against)",
        choices=STANDIN_COMPUTE,
    )

    def check(self) -> None:
        """An `InputError` naming the flag of the first bad setting."""
        options.check_options(self)
        stragglers = (self.straggler_nodes,) if self.straggler_nodes else ()
        racks = (self.trunk_nodes,) if self.trunk_nodes else ()
        for flag, counts in (
            ("--nodes", self.nodes),
            ("--straggler-nodes", stragglers),
            ("--trunk-nodes", racks),
        ):
            for n in counts:
                if not 2 <= n <= MAX_NODES:
                    raise InputError(f"{flag}: {n} is not 2 to {MAX_NODES}")
        for flag, named in (
            ("--nodes", self.nodes),
            ("--rates", self.rates),
            ("--models", self.models),
        ):
            if not named:
                raise InputError(f"{flag}: name at least one")
        if self.trunk_nodes and not self.trunk_rates:
            raise InputError("--trunk-rates: name at least one")
        for flag, rates in (
            ("--rates", self.rates),
            ("--straggler-rate", (self.straggler_rate,)),
            ("--trunk-rates", self.trunk_rates),
        ):
            for rate in rates:
                try:
                    Rate.parse(rate)
                except InputError as err:
                    raise InputError(f"{flag}: {err}") from None
        if self.steps % self.aavg_k:  # the planner spreads an averaging over its k steps
            raise InputError(
                f"--steps: a multiple of --aavg-k ({self.aavg_k}), so that every averaging "
                f"period is measured whole, got {self.steps}"
            )
        if self.epoch_k and self.epoch_k % self.aavg_k:
            raise InputError(
                f"--epoch-k: a multiple of --aavg-k ({self.aavg_k}), got {self.epoch_k}"
            )
        if not self.baseline.is_file():
            raise InputError(f"--baseline: {self.baseline} is not a file (a bench network JSON)")
        baseline = self.read_baseline()
        for model in self.models:
            if model not in baseline["one_process_step_s"]:
                raise InputError(f"--models: {model} is not in {self.baseline}")
            if self.standin_compute == "in_pass":
                self._check_in_pass(baseline, model)
            elif model not in baseline.get(self.waited_key, {}):
                raise InputError(
                    f"--standin-compute: {self.baseline} has no {self.standin_compute} step "
                    f"of {model} (bench network records it as {self.waited_key} since it "
                    "measures it)"
                )

    def read_baseline(self) -> dict[str, Any]:
        try:
            found: dict[str, Any] = json.loads(self.baseline.read_text())
            for key in ("one_process_step_s", "hook_compute_s", "links", "settings"):
                found[key]
        except (ValueError, KeyError) as err:
            raise InputError(
                f"--baseline: {self.baseline} is not a bench network JSON ({err})"
            ) from None
        return found

    def _check_in_pass(self, baseline: dict[str, Any], model: str) -> None:
        found = {(r["rate"], r["model"]) for r in once_an_epoch(baseline)}
        for rate in self.rates:
            if (Rate.parse(rate).label, model) not in found:
                raise InputError(
                    f"--standin-compute: {self.baseline} has no two-node AAVG row of {model} "
                    f"at {rate} that averages once an epoch (in_pass needs one per rate)"
                )

    @property
    def waited_key(self) -> str:
        """The baseline's key of the steps the stand-ins wait (`standin_compute`; not in_pass,
        which reads the baseline's rows)."""
        return f"{self.standin_compute}_step_s"

    def waited_steps(self, baseline: dict[str, Any], rate: str | None = None) -> dict[str, float]:
        """Each model's one-node step the stand-ins wait (`standin_compute`): for in_pass, the
        compute of `rate`'s (default: the first rate's) real AAVG rows averaging once an
        epoch."""
        if self.standin_compute == "in_pass":
            label = Rate.parse(rate or self.rates[0]).label
            return {
                r["model"]: r["compute_s"]
                for r in once_an_epoch(baseline)
                if r["rate"] == label and r["model"] in self.models
            }
        steps: dict[str, float] = baseline[self.waited_key]
        return {model: steps[model] for model in self.models}

    def variants(self) -> list[tuple[str, str, int]]:
        """(strategy, hook, k) of every pass at one node count, AAVG per epoch last."""
        out = [("ddp", hook, 0) for hook in self.hooks]
        out.append(("aavg", "none", self.aavg_k))
        if self.epoch_k:
            out.append(("aavg", "none", self.epoch_k))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "baseline": str(self.baseline)}


def once_an_epoch(baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """A bench network JSON's two-node AAVG rows that average once in its epoch (`epoch_k`
    steps): almost nothing to send, so their compute is the ranks' own at that time."""
    epoch = baseline["settings"].get("epoch_k")
    return [r for r in baseline["rows"] if r["strategy"] == "aavg" and epoch and r["k"] == epoch]
