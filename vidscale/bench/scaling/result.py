"""`bench scaling`'s result, typed: `ScalingResult` (the JSON `--out-json` writes, which
`vidscale plan --measured` and `--baseline` read back), one `ScalingRun` per (model, variant,
process count), one `RankSteps` per rank of a run.

`ScalingResult.to_dict()` is the JSON document, key for key; `ScalingResult.read(path)` parses
one, raising `InputError` (a `ValueError`) in one line naming the file and the key missing or
ill-typed. Files written before the fast-path settings and `--data` were recorded lack the
settings `fast_settings`, `data`, `source` and `layout`: those read as their defaults and are
left out of `to_dict()` again (`ScalingResult.unrecorded`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from vidscale.bench.results import DEFAULT_SOURCE, Fields, HostInfo, fields_of, plain, read_json
from vidscale.bench.scaling.config import ScalingConfig
from vidscale.errors import InputError

WHAT = "`vidscale bench scaling`"
# Each setting's JSON type (a `Fields` getter); settings recorded only since a later version.
_SETTING_TYPES = {
    "models": "texts",
    "procs": "integers",
    "steps": "integer",
    "warmup": "integer",
    "batch": "integer",
    "frames": "integer",
    "size": "integer",
    "num_classes": "integer",
    "threads": "integer",
    "workers": "integer",
    "hooks": "texts",
    "strategies": "texts",
    "aavg_k": "integer",
    "device": "text",
    "fast_path": "flag",
    "bucket_cap_mb": "number",
    "seed": "integer",
    "fast_settings": "texts",
    "data": "text",
    "source": "text",
    "layout": "text",
}
LATER_SETTINGS = ("fast_settings", "data", "source", "layout")
_SOURCES = ("videos", "shards", "stream")


@dataclass(frozen=True)
class Spread:
    """A run's step times over its steps and ranks: median, 10th and 90th percentiles,
    standard deviation, min and max, in seconds."""

    median: float
    p10: float
    p90: float
    std: float
    min: float
    max: float

    @classmethod
    def from_fields(cls, f: Fields) -> Spread:
        return cls(**{k.name: f.number(k.name) for k in dataclasses.fields(cls)})

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RankSteps:
    """One rank's measured steps (one value per step): the step, its exposed data wait and
    communication (DDP's forward buffer broadcast `forward_sync_s` included), the time with a
    collective in flight, bytes and collectives, the training thread's CPU time, and
    `compute_s` (the step less the exposed parts); `process_cpu_s`, the whole process's CPU
    time (every thread's), is empty in files measured before it was recorded."""

    SERIES: ClassVar[tuple[str, ...]] = (
        "step_s",
        "data_wait_s",
        "comm_exposed_s",
        "forward_sync_s",
        "comm_in_flight_s",
        "comm_bytes",
        "comm_rounds",
        "thread_cpu_s",
        "compute_s",
    )
    OPTIONAL: ClassVar[tuple[str, ...]] = ("process_cpu_s",)

    rank: int
    step_s: tuple[float, ...]
    data_wait_s: tuple[float, ...]
    comm_exposed_s: tuple[float, ...]
    forward_sync_s: tuple[float, ...]
    comm_in_flight_s: tuple[float, ...]
    comm_bytes: tuple[float, ...]
    comm_rounds: tuple[float, ...]
    thread_cpu_s: tuple[float, ...]
    compute_s: tuple[float, ...]
    process_cpu_s: tuple[float, ...] = ()

    @classmethod
    def from_fields(cls, f: Fields) -> RankSteps:
        series = {k: f.numbers(k) for k in cls.SERIES}
        series |= {k: f.numbers(k) for k in cls.OPTIONAL if k in f.data}
        return cls(rank=f.integer("rank"), **series)

    def to_dict(self) -> dict[str, Any]:
        recorded = [k for k in self.OPTIONAL if getattr(self, k)]
        return {"rank": self.rank, **{k: list(getattr(self, k)) for k in (*self.SERIES, *recorded)}}


# The per-run means, in the JSON's order between `step_spread_s` and `load_average`.
_MEANS = (
    "compute_s",
    "data_wait_s",
    "comm_exposed_s",
    "forward_sync_s",
    "comm_in_flight_s",
    "comm_bytes_per_step",
    "comm_rounds_per_step",
    "thread_cpu_s",
)


@dataclass(frozen=True)
class ScalingRun:
    """One (model, variant, process count) of a `bench scaling` run: its identity, the
    model's size, the batch, the speed (and against one process: ideal speed, speed-up and
    efficiency, None without a one-process run of the model), the mean step and its parts
    per step (over steps and ranks), the host's load average before and after, and every
    rank's steps. `variant` is the label (`1 process`, `ddp`, `ddp+bf16`, `aavg k=4`) of
    `strategy` (`single`, `ddp`, `aavg`) with `hook` and AAVG's `k`."""

    model: str
    variant: str
    strategy: str
    hook: str
    k: int
    procs: int
    device: str
    fast_path: str
    params: int
    grad_bytes: int
    batch_per_process: int
    global_batch: int
    steps: int
    clips_per_s: float
    ideal_clips_per_s: float | None
    speedup: float | None
    efficiency: float | None
    step_s: float
    step_spread_s: Spread
    compute_s: float
    data_wait_s: float
    comm_exposed_s: float
    forward_sync_s: float
    comm_in_flight_s: float
    comm_bytes_per_step: float
    comm_rounds_per_step: float
    thread_cpu_s: float
    load_average: tuple[float | None, ...]
    ranks: tuple[RankSteps, ...]
    # Measured steps that applied their update (`step.applied`; None: measured before it was
    # counted). A row with none is refused when measured, so it is between 1 and `steps`.
    applied_steps: int | None = None
    # The rank processes' CPU time a step, every thread's (None: measured before it was
    # recorded); what `compute_s` has beyond it, a core pinned to the rank gave elsewhere.
    process_cpu_s: float | None = None

    @property
    def label(self) -> str:
        """The run as the table shows it: `tsm_resnet50 1 process`, `... ddp, 2 processes`."""
        return f"{self.model} {self.variant}" + (
            "" if self.procs == 1 else f", {self.procs} processes"
        )

    @classmethod
    def from_fields(cls, f: Fields) -> ScalingRun:
        texts = ("model", "variant", "strategy", "hook", "device", "fast_path")
        ints = ("k", "procs", "params", "grad_bytes", "batch_per_process", "global_batch", "steps")
        values: dict[str, Any] = {k: f.text(k) for k in texts}
        values |= {k: f.integer(k) for k in ints}
        values["clips_per_s"] = f.number("clips_per_s")
        values |= {k: f.opt_number(k) for k in ("ideal_clips_per_s", "speedup", "efficiency")}
        values["step_s"] = f.number("step_s")
        values["step_spread_s"] = Spread.from_fields(f.obj("step_spread_s"))
        values |= {k: f.number(k) for k in _MEANS}
        values["load_average"] = f.opt_numbers("load_average")
        values["ranks"] = tuple(RankSteps.from_fields(r) for r in f.objs("ranks"))
        counted = "applied_steps" in f.data  # not in files measured before it was counted
        values["applied_steps"] = f.opt_integer("applied_steps") if counted else None
        recorded = "process_cpu_s" in f.data
        values["process_cpu_s"] = f.opt_number("process_cpu_s") if recorded else None
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if spec.name in ("applied_steps", "process_cpu_s") and value is None:
                continue  # a file measured before it was counted is written back as it was
            if spec.name == "step_spread_s":
                value = value.to_dict()
            elif spec.name == "ranks":
                value = [r.to_dict() for r in value]
            out[spec.name] = plain(value)
        return out

    def as_measurement(self) -> dict[str, Any]:
        """The run as the workers measured it (`report.build_report`'s input): an earlier
        run's rows join a new report this way (`--baseline`)."""
        identity = ("model", "variant", "strategy", "hook", "k", "procs", "device", "fast_path")
        out = {k: getattr(self, k) for k in identity}
        return out | {
            "params": self.params,
            "grad_bytes": self.grad_bytes,
            "applied_steps": self.applied_steps,
            "load_average": list(self.load_average),
            "ranks": [r.to_dict() for r in self.ranks],
        }


@dataclass(frozen=True)
class ScalingResult:
    """A `vidscale bench scaling` report: the paper it follows (`reference`), what was
    measured (`settings`, resolved for the host), the host, what the clips were (`data`),
    what each number means (`definitions`), and one row per run, each model's one-process
    run first. `unrecorded`: settings an older file lacks (module docstring)."""

    BENCHMARK: ClassVar[str] = "scaling"

    reference: str
    settings: ScalingConfig
    host: HostInfo
    data: str
    definitions: Mapping[str, str]
    runs: tuple[ScalingRun, ...]
    unrecorded: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON document `bench scaling --out-json` writes."""
        settings = plain(self.settings.as_dict())
        return {
            "benchmark": self.BENCHMARK,
            "reference": self.reference,
            "settings": {k: v for k, v in settings.items() if k not in self.unrecorded},
            "host": self.host.to_dict(),
            "data": self.data,
            "definitions": dict(self.definitions),
            "runs": [r.to_dict() for r in self.runs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = DEFAULT_SOURCE) -> ScalingResult:
        """Parse `to_dict()`'s document; `InputError` naming `source` and the key at fault."""
        f = fields_of(data, source=source, what=WHAT)
        if f.data.get("benchmark") != cls.BENCHMARK or not isinstance(f.data.get("runs"), list):
            raise InputError(f'{source}: not a {WHAT} JSON (no "benchmark": "scaling" and runs)')
        settings, unrecorded = _settings(f.obj("settings"))
        definitions = f.obj("definitions")
        return cls(
            reference=f.text("reference"),
            settings=settings,
            host=HostInfo.from_fields(f.obj("host")),
            data=f.text("data"),
            definitions={k: definitions.text(k) for k in definitions.data},
            runs=tuple(ScalingRun.from_fields(r) for r in f.objs("runs")),
            unrecorded=unrecorded,
        )

    @classmethod
    def read(cls, path: Path) -> ScalingResult:
        """The report in the JSON file at `path`; `InputError` naming the file (and the key)
        when it cannot be read, is not such a report, or lacks a key or has one ill-typed."""
        return cls.from_dict(read_json(path, what=WHAT).data, source=str(path))

    def runs_of(self, model: str) -> list[ScalingRun]:
        """`model`'s runs, in the report's order (its one-process run first)."""
        return [r for r in self.runs if r.model == model]

    @property
    def models(self) -> list[str]:
        """The models measured, in the report's order."""
        return list(dict.fromkeys(r.model for r in self.runs))


def _settings(f: Fields) -> tuple[ScalingConfig, tuple[str, ...]]:
    """The settings object as the `ScalingConfig` measured, and the later settings it lacks."""
    unrecorded = tuple(k for k in LATER_SETTINGS if not f.has(k))
    given: dict[str, Any] = {}
    for key, kind in _SETTING_TYPES.items():
        if key in unrecorded:
            continue
        given[key] = getattr(f, kind)(key)
    for key, allowed in (("device", ("auto", "cpu", "cuda")), ("source", _SOURCES)):
        if key in given and given[key] not in allowed:
            raise f.bad(key, " or ".join(allowed), given[key])
    return ScalingConfig(**given), unrecorded
