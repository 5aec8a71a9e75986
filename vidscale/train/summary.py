"""Counters a run accumulates (and checkpoints), merged over ranks into `summary.json`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol


class _Step(Protocol):
    wait_s: float
    skipped: list[tuple[str, str]]


@dataclass
class RunCounters:
    steps: int = 0
    clips: int = 0  # global clips trained on (all ranks, all micro-batches)
    step_seconds: float = 0.0
    wait_seconds: float = 0.0  # blocked on the next batch: loading not hidden by compute
    wall_seconds: float = 0.0
    allreduce_bytes: int = 0  # gradient bytes this rank sent into all-reduces
    val_history: list[float] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # path -> first reason seen

    def add_step(self, result: _Step, *, seconds: float, global_batch: int) -> None:
        self.steps += 1
        self.clips += global_batch
        self.step_seconds += seconds
        self.wait_seconds += result.wait_s
        self.add_skipped(result.skipped)

    def add_skipped(self, items: list[tuple[str, str]]) -> None:
        for path, reason in items:
            self.skipped.setdefault(str(path), str(reason))

    def add_val(self, top1: float) -> None:
        self.val_history.append(top1)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunCounters:
        return cls(**data)

    @classmethod
    def merge(cls, per_rank: list[dict[str, Any]]) -> MergedCounters:
        ranks = [cls.from_dict(d) for d in per_rank]
        skipped: dict[str, str] = {}
        for r in ranks:
            for path, reason in r.skipped.items():
                skipped.setdefault(path, reason)
        return MergedCounters(main=ranks[0], ranks=ranks, skipped=skipped)


@dataclass
class MergedCounters:
    main: RunCounters
    ranks: list[RunCounters]
    skipped: dict[str, str]

    def summary(
        self,
        *,
        model: str,
        world_size: int,
        global_batch: int,
        epochs: int,
        num_classes: int,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        main = self.main
        wait = max(r.wait_seconds / r.step_seconds if r.step_seconds else 0.0 for r in self.ranks)
        hist = main.val_history
        return {
            "model": model,
            "world_size": world_size,
            "global_batch": global_batch,
            "epochs": epochs,
            "num_classes": num_classes,
            "chance_top1": 100.0 / num_classes,
            "val_top1": hist[-1] if hist else None,
            "best_val_top1": max(hist) if hist else None,
            "val_top1_history": hist,
            "wall_seconds": main.wall_seconds,
            "train_steps": main.steps,
            "clips_per_second": main.clips / main.step_seconds if main.step_seconds else 0.0,
            # The TSM paper's Fig. 3b metric: share of step time blocked on data, max over ranks.
            "data_wait_fraction": wait,
            "allreduce_bytes_per_step": main.allreduce_bytes / main.steps if main.steps else 0.0,
            "skipped": [{"path": p, "reason": r} for p, r in sorted(self.skipped.items())],
            **extra,
        }


def write_summary(summary: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(summary, indent=2) + "\n")
