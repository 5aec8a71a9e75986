"""A run's fast-path decision: the (bf16, channels_last) it trains with, where that came from
and the numbers behind it (`FastPathDecision`, made by `probe.decide`), and what a resume
hands back of it (`Resumed`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from vidscale.fastpath.isolation import IsolatedProbe
from vidscale.fastpath.rule import Choice, choose, reference_of
from vidscale.fastpath.settings import Candidate
from vidscale.fastpath.trials import ProbeShape

Source = Literal["off", "explicit", "probe", "cache", "checkpoint", "hardware"]


@dataclass(frozen=True)
class FastPathDecision:
    """The (bf16, channels_last) a run uses, where it came from, and the numbers behind it.

    `source`: "off" (`train.fast_path=false`), "explicit" (both axes set), "probe" (measured
    now), "cache" (measured before, `fastpath.cache`), "checkpoint" (recorded by the run being
    resumed), "hardware" (a resumed checkpoint from before decisions were recorded).
    `measured` maps each candidate's label to its `Measured` fields, computed by `choose` from
    `samples` (seconds per round and candidate: `choose(samples)` gives the decision again);
    `rounds` counts the samples per candidate over all ranks; `load_average` is rank 0's
    1-minute load average when the probe started (above the core count, other work shared the
    cores, and the noise shows it); `failed` names the candidates left out because they hung,
    crashed or raised in the probe (`fastpath.isolation`), on any rank, with what happened;
    `dropped` those its first rounds ruled out on any rank (`rule.hopeless`), why;
    `seconds` how long the run waited for the probe (rank 0, until every rank had finished).
    """

    bf16: bool
    channels_last: bool
    source: Source
    reason: str = ""
    shape: tuple[int, ...] = ()
    measured: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    rounds: int = 0
    load_average: float | None = None
    failed: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    seconds: float | None = None

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.bf16, self.channels_last)

    @property
    def reference(self) -> str:
        """The candidate the probe's speedups are relative to ("" when nothing was probed)."""
        return reference_of(self.measured) if self.measured else ""

    def record(self) -> dict[str, Any]:
        """JSON- and `torch.load(weights_only=True)`-safe: plain types only."""
        return dataclasses.asdict(self) | {"shape": list(self.shape)}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> FastPathDecision:
        return cls(
            bf16=bool(record["bf16"]),
            channels_last=bool(record["channels_last"]),
            source=record["source"],
            reason=str(record.get("reason", "")),
            shape=tuple(int(n) for n in record.get("shape", ())),
            measured={k: dict(v) for k, v in record.get("measured", {}).items()},
            samples={k: [float(t) for t in v] for k, v in record.get("samples", {}).items()},
            rounds=int(record.get("rounds", 0)),
            load_average=record.get("load_average"),
            failed={str(k): str(v) for k, v in record.get("failed", {}).items()},
            dropped={str(k): str(v) for k, v in record.get("dropped", {}).items()},
            seconds=record.get("seconds"),
        )

    @classmethod
    def measured_by(
        cls,
        choice: Choice,
        *,
        samples: Mapping[str, Sequence[float]],
        shape: ProbeShape,
        load_average: float | None = None,
        source: Source = "probe",
        failed: Mapping[str, str] | None = None,
        dropped: Mapping[str, str] | None = None,
    ) -> FastPathDecision:
        chosen = Candidate.from_label(choice.chosen)
        reason = choice.reason
        if dropped and len(samples) == 1:  # `choose` saw only the survivor
            reason = "every other setting was ruled out in its first rounds"
        return cls(
            bf16=chosen.bf16,
            channels_last=chosen.channels_last,
            source=source,
            reason=reason,
            shape=shape.clips,
            measured={k: dataclasses.asdict(m) for k, m in choice.measured.items()},
            samples={k: list(v) for k, v in samples.items()},
            rounds=len(samples[choice.chosen]),
            load_average=load_average,
            failed=dict(failed or {}),
            dropped=dict(dropped or {}),
        )

    @classmethod
    def from_probe(
        cls, measured: IsolatedProbe, *, shape: ProbeShape, load_average: float | None = None
    ) -> FastPathDecision:
        """The decision `choose` makes from a probe's samples, naming what it left out."""
        return cls.measured_by(
            choose(measured.samples),
            samples=measured.samples,
            shape=shape,
            load_average=load_average,
            failed=measured.failed,
            dropped=measured.dropped,
        )

    def numbers(self) -> str:
        """The probe's medians, e.g. "fp32 0.35 s; bf16+cl 0.364 s = 0.96x (noise 1%, faster
        in 0/10)": seconds per step, then the speedup over the reference."""
        parts = []
        for label, m in self.measured.items():
            text = f"{label} {m['seconds']:.3g} s"
            if label != self.reference:
                rounds = f"faster in {m['faster_rounds']}/{self.rounds}"
                text += f" = {m['speedup']:.2f}x (noise {m['noise']:.0%}, {rounds})"
            parts.append(text)
        return "; ".join(parts)

    def describe(self) -> str:
        label = self.candidate.label
        if self.source in ("off", "explicit"):
            return f"{label} ({self.reason})"
        if self.source in ("checkpoint", "hardware"):
            return f"{label}, {self.reason}"
        shape = "x".join(map(str, self.shape))
        where = "probe" if self.source == "probe" else "cached probe"
        took = "" if self.seconds is None else f" in {self.seconds:.0f} s"
        load = "" if self.load_average is None else f", load average {self.load_average:.1f}"
        left_out = "".join(f"; left out {k}: {v}" for k, v in self.failed.items()) + "".join(
            f"; {k} {v}" for k, v in self.dropped.items()
        )
        return (
            f"auto chose {label} ({where} at {shape}, {self.rounds} rounds{took}{load}): "
            f"{self.numbers()}; {self.reason}{left_out}"
        )


class Resumed(Protocol):
    """What a resume hands the decision: the resumed checkpoint's record
    (`run.record.RunRecord`), whose `fast_path` is None when it was written before
    decisions were recorded."""

    @property
    def fast_path(self) -> FastPathDecision | None: ...
