"""Counters a run accumulates (and checkpoints), merged over ranks into the run's summary
(`run_summary.RunSummary`, `summary.json`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from vidscale.distributed.traffic import Traffic
from vidscale.run.summary import RunSummary


class _Step(Protocol):
    @property
    def wait_s(self) -> float: ...
    @property
    def skipped(self) -> list[tuple[str, str]]: ...


@dataclass
class RunCounters:
    steps: int = 0
    clips: int = 0  # global clips trained on (all ranks, all micro-batches)
    step_seconds: float = 0.0
    wait_seconds: float = 0.0  # blocked on the next batch: loading not hidden by compute
    wall_seconds: float = 0.0
    # This rank's data-parallel communication (`Traffic`): bytes sent, seconds with a
    # collective in flight, synchronisation rounds (DDP: steps; AAVG: averagings).
    comm_bytes: int = 0
    comm_seconds: float = 0.0
    comm_rounds: int = 0
    val_history: list[float] = field(default_factory=list)
    # multi-label runs: each evaluation's mAP (0..1) and the last one's chance level
    map_history: list[float] = field(default_factory=list)
    map_chance: float | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # path -> first reason seen
    bad_steps: list[int] = field(default_factory=list)  # non-finite steps, skipped on every rank
    val_videos: int | None = None  # readable videos of the last evaluation, all ranks
    val_unreadable: list[tuple[str, str]] = field(default_factory=list)  # its (path, reason)

    def add_step(self, result: _Step, *, seconds: float, global_batch: int) -> None:
        self.steps += 1
        self.clips += global_batch
        self.step_seconds += seconds
        self.wait_seconds += result.wait_s
        self.add_skipped(result.skipped)

    def add_traffic(self, traffic: Traffic) -> None:
        self.comm_bytes += traffic.bytes_sent
        self.comm_seconds += traffic.seconds
        self.comm_rounds += traffic.rounds

    def add_skipped(self, items: list[tuple[str, str]]) -> None:
        for path, reason in items:
            self.skipped.setdefault(str(path), str(reason))

    def add_val(
        self, top1: float, *, mean_ap: float | None = None, chance: float | None = None
    ) -> None:
        """An evaluation's top-1 and, for multi-label data, its mAP and chance level."""
        self.val_history.append(top1)
        if mean_ap is not None:
            self.map_history.append(mean_ap)
            self.map_chance = chance

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunCounters:
        data = dict(data)
        if "allreduce_bytes" in data:  # checkpoints written before the seconds were counted
            data["comm_bytes"] = data.pop("allreduce_bytes")
        return cls(**data)

    @classmethod
    def restored(cls, saved: list[dict[str, Any]], *, rank: int, world_size: int) -> RunCounters:
        """This rank's counters from a checkpoint's per-rank list. On another process count,
        rank 0 continues rank 0's (with every rank's skipped inputs) and the others start at
        zero: per-rank timings of a different layout would mean nothing."""
        if len(saved) == world_size:
            return cls.from_dict(saved[rank])
        if rank != 0:
            return cls()
        merged = cls.merge(saved)
        return replace(merged.main, skipped=merged.skipped)

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
    ) -> RunSummary:
        """The run's summary from the counters, with the caller's `extra` keys after them."""
        main = self.main
        wait = max(r.wait_seconds / r.step_seconds if r.step_seconds else 0.0 for r in self.ranks)
        hist = main.val_history
        record = {
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
            # This rank's (rank 0's) data-parallel communication over the run.
            "comm_bytes": main.comm_bytes,
            "comm_seconds": main.comm_seconds,
            "comm_rounds": main.comm_rounds,
            "comm_bytes_per_step": main.comm_bytes / main.steps if main.steps else 0.0,
            "skipped": [{"path": p, "reason": r} for p, r in sorted(self.skipped.items())],
            # Steps not finite on some rank, skipped everywhere (no update), and how many of
            # the run's steps applied their update.
            "bad_steps": main.bad_steps,
            "skipped_steps": len(main.bad_steps),
            "applied_steps": main.steps - len(main.bad_steps),
            "val_videos": main.val_videos,
            "val_unreadable": [{"path": p, "reason": r} for p, r in main.val_unreadable],
            **_map_fields(main),
            **extra,
        }
        return RunSummary.of_record(record)


def _map_fields(main: RunCounters) -> dict[str, Any]:
    """A multi-label run's mAP (0..1: last, best, every evaluation's) and its chance level (the
    validation classes' mean positive rate); nothing for a single-label run."""
    hist = main.map_history
    if not hist:
        return {}
    return {
        "val_map": hist[-1],
        "best_val_map": max(hist),
        "val_map_history": hist,
        "chance_map": main.map_chance,
    }


@dataclass
class EpochTotals:
    """The current epoch's sums over all ranks (from the per-step agreement), checkpointed so a
    resumed epoch reports the same metrics as an uninterrupted one."""

    loss: float = 0.0  # sum over finite steps of the step's mean loss
    steps: int = 0  # finite steps
    hits: int = 0
    clips: int = 0
    wait_seconds: float = 0.0  # this rank's time blocked on data
    step_seconds: float = 0.0  # this rank's step time
    comm_bytes: int = 0  # this rank's data-parallel communication (`Traffic`)
    comm_seconds: float = 0.0
    comm_rounds: int = 0
    skipped: int = 0  # steps not finite on some rank: no update applied

    def add(
        self, *, loss: float, hits: int, clips: int, finite: bool, wait: float, seconds: float
    ) -> None:
        if finite:
            self.loss += loss
            self.steps += 1
            self.hits += hits
            self.clips += clips
        else:
            self.skipped += 1
        self.wait_seconds += wait
        self.step_seconds += seconds

    def add_traffic(self, traffic: Traffic) -> None:
        self.comm_bytes += traffic.bytes_sent
        self.comm_seconds += traffic.seconds
        self.comm_rounds += traffic.rounds

    def stats(self) -> dict[str, float]:
        return {
            "train_loss": self.loss / max(self.steps, 1),
            "train_top1": 100.0 * self.hits / max(self.clips, 1),
            "epoch_seconds": self.step_seconds,
            "data_wait_fraction": self.wait_seconds / max(self.step_seconds, 1e-9),
            "comm_bytes": self.comm_bytes,
            "comm_seconds": self.comm_seconds,
            "comm_rounds": self.comm_rounds,
            "skipped_steps": self.skipped,
        }

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
