"""Where a run starts: fresh, or exactly where its newest loadable checkpoint stopped.

`vidscale train` on a run directory continues it by default (`--resume auto`), so a torchrun
restart (`--max-restarts`), a SLURM requeue and a plain re-run of the same command all continue
the run instead of overwriting it. `never` refuses a directory that already holds a run; `must`
refuses one without a checkpoint.

**The plan rule.** A checkpoint records the plan it was made under (world size, accumulation,
global batch, steps per epoch, total steps, training videos) and the config. On resume:
- the process count may change: the global batch is kept and accumulation adapts (refused, with
  the reason, when the new count cannot divide it); progress continues at the same optimizer
  step, which on map-style data covers the same clips (the sampler's order is a function of
  (seed, epoch) and steps cover consecutive global positions);
- a change of the global batch, epochs, training videos, optimizer, LR, multigrid or schedule
  fields is refused naming each field, unless `train.allow_plan_change=true`: then progress is
  carried over as clips seen (step = clips seen // new global batch) and the new schedule
  continues from there (not for multigrid runs, whose steps differ from phase to phase);
- the model (name, classes, input channels) can never change;
- any other changed field (workers, logging, paths) is allowed and listed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vidscale.atomic import atomic_write_text, remove_stale_tmp
from vidscale.config import ConfigError, RunConfig, save_config
from vidscale.distributed.collectives import all_gather_object
from vidscale.distributed.env import DistEnv
from vidscale.run.checkpoint import newest_loadable
from vidscale.run.metrics import truncate_metrics
from vidscale.run.record import RunRecord, flat_config
from vidscale.run.timeline import RunSizes, requested_global_batch, run_sizes

ResumeMode = Literal["auto", "never", "must"]
RESUME_MODES: tuple[str, ...] = ("auto", "never", "must")

FIXED_FIELDS = ("model.name", "model.num_classes", "model.in_channels")
CHECKED_FIELDS = ("train.epochs", "optim.name", "optim.lr_per_8_clips")
GLOBAL_BATCH, TRAIN_VIDEOS = "global batch", "training videos"


@dataclass
class Progress:
    """How far a run got: complete epochs, optimizer steps, steps into the current epoch."""

    epoch: int = 0
    step: int = 0
    step_in_epoch: int = 0

    def state_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.step_in_epoch = int(state["step_in_epoch"])


@dataclass(frozen=True)
class Start:
    """The sizes a run follows and where it starts in them."""

    sizes: RunSizes
    progress: Progress
    exact: bool  # the same run continues (False after a carried-over plan change)
    notes: list[str]
    path: Path | None = None  # the checkpoint it continues
    state: dict[str, Any] | None = None  # that checkpoint, loaded (to the CPU)
    record: RunRecord | None = None  # that checkpoint's record (`record.RunRecord`)


def _checked_values(
    flat: Mapping[str, Any], *, global_batch: int | str, train_size: int
) -> dict[str, Any]:
    schedule = (k for k in flat if k.startswith(("lr.", "multigrid.")))
    values = {k: flat.get(k) for k in (*CHECKED_FIELDS, *schedule)}
    values[GLOBAL_BATCH] = global_batch
    values[TRAIN_VIDEOS] = train_size
    return values


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any], keys: Any) -> list[str]:
    """`field old -> new` for each of `keys` whose value differs between two flat configs."""
    return [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


def _changes(
    cfg: RunConfig, old_flat: Mapping[str, Any], old: RunSizes, *, train_size: int
) -> tuple[list[str], list[str]]:
    """The plan fields that `cfg` changes from the checkpoint's config `old_flat` and sizes
    `old`, and every other changed field (`field old -> new`).

    The global batch is compared as `cfg` would make it on the old process count, so a resume
    on another count is not a change.
    """
    new_flat = flat_config(cfg)
    try:
        asked: int | str = requested_global_batch(cfg, world_size=old.world_size)
    except ConfigError:  # the new settings cannot even run on the old process count
        asked = "(not a valid batch on the old process count)"
    old_values = _checked_values(old_flat, global_batch=old.global_batch, train_size=old.train_size)
    new_values = _checked_values(new_flat, global_batch=asked, train_size=train_size)
    checked_keys = dict.fromkeys([*old_values, *new_values])
    others = sorted((set(old_flat) | set(new_flat)) - set(checked_keys))
    return field_changes(old_values, new_values, checked_keys), field_changes(
        old_flat, new_flat, others
    )


def _process_count_notes(
    cfg: RunConfig, old: RunSizes, sizes: RunSizes, progress: Progress
) -> list[str]:
    if sizes.world_size == old.world_size:
        return []
    notes = [
        f"{old.world_size} -> {sizes.world_size} processes: global batch {sizes.global_batch} "
        f"kept, accumulation {old.accumulate} -> {sizes.accumulate}"
    ]
    if cfg.data.source == "stream" and progress.step_in_epoch:
        # Streaming cuts each epoch into one contiguous range per (rank, worker).
        notes.append(
            "data.source=stream: the rest of this epoch is cut among the new processes "
            "anew, so some of its clips may repeat or be missed"
        )
    return notes


def resolve_start(
    cfg: RunConfig,
    state: dict[str, Any] | None,
    *,
    world_size: int,
    train_size: int,
    source: str = "",
) -> Start:
    """The sizes and starting point for `cfg` on `world_size` processes, from a checkpoint's
    `state` (None: a fresh run) read from `source`. Raises `ConfigError` naming the fields of a
    refused change, `UnreadableCheckpoint` naming the key of a malformed record."""
    if state is None:
        sizes = run_sizes(cfg, world_size=world_size, train_size=train_size)
        return Start(sizes, Progress(), True, [])
    record = RunRecord.of(state, path=source)
    progress = Progress(**state["progress"])
    start = _continued(
        cfg, record, progress, world_size=world_size, train_size=train_size, source=source
    )
    return dataclasses.replace(start, record=record)


def _continued(
    cfg: RunConfig,
    record: RunRecord,
    progress: Progress,
    *,
    world_size: int,
    train_size: int,
    source: str,
) -> Start:
    """`resolve_start` for a checkpoint with `record` that got to `progress`."""
    if record.origin is None:
        # Written before run sizes were recorded: nothing to check against.
        sizes = run_sizes(cfg, world_size=world_size, train_size=train_size)
        note = f"{source} records no plan: not checked, and this epoch's metrics restart"
        return Start(sizes, progress, True, [note])
    old, old_flat = record.origin.sizes, record.origin.config
    fixed = field_changes(old_flat, flat_config(cfg), FIXED_FIELDS)
    if fixed:
        raise ConfigError(f"--resume: {source} holds another model: {'; '.join(fixed)}")
    changed, others = _changes(cfg, old_flat, old, train_size=train_size)
    notes = [f"changed since {source}: {'; '.join(others)}"] if others else []
    if not changed:
        sizes = run_sizes(
            cfg, world_size=world_size, train_size=train_size, global_batch=old.global_batch
        )
        return Start(sizes, progress, True, notes + _process_count_notes(cfg, old, sizes, progress))
    if not cfg.train.allow_plan_change:
        raise ConfigError(
            f"--resume: the plan of {source} would change: {'; '.join(changed)} "
            "(use a new run directory, or --set train.allow_plan_change=true to continue "
            "from the clips seen so far)"
        )
    if (
        cfg.multigrid.enabled
        or old_flat.get("multigrid.long_cycle")
        or old_flat.get("multigrid.short_cycle")
    ):
        raise ConfigError(
            f"--resume: the plan of {source} would change: {'; '.join(changed)}; a multigrid "
            "run's steps differ from phase to phase, so its progress cannot be carried over "
            "as clips seen (use a new run directory)"
        )
    sizes = run_sizes(cfg, world_size=world_size, train_size=train_size)
    clips_seen = progress.step * old.global_batch
    step = min(clips_seen // sizes.global_batch, sizes.total_steps)
    epoch, in_epoch = divmod(step, sizes.steps_per_epoch)
    notes.append(
        f"plan changed ({'; '.join(changed)}): {clips_seen} clips seen -> step {step} of "
        f"{sizes.total_steps}"
    )
    return Start(sizes, Progress(epoch, step, in_epoch), False, notes)


def check_directory(run_dir: Path, *, mode: ResumeMode, has_checkpoint: bool) -> None:
    """Refuse what `--resume never` / `--resume must` forbid, naming the directory."""
    if mode == "never" and run_dir.is_dir() and any(run_dir.iterdir()):
        raise ConfigError(
            f"--resume never: {run_dir} is not empty (choose a new --out, or --resume auto)"
        )
    if mode == "must" and not has_checkpoint:
        raise ConfigError(f"--resume must: {run_dir} holds no loadable checkpoint")


def find_start(
    cfg: RunConfig, run_dir: Path, env: DistEnv, *, mode: ResumeMode, train_size: int
) -> Start:
    """Where the run in `run_dir` starts: its newest loadable checkpoint under the plan rule,
    or afresh. Every rank searches the same shared directory; the ranks check that they found
    the same file (a collective)."""
    search = newest_loadable(run_dir)
    check_directory(run_dir, mode=mode, has_checkpoint=search.path is not None)
    step = search.state["progress"]["step"] if search.state else None
    seen = all_gather_object((str(search.path), step))
    if len(set(seen)) > 1:
        raise ConfigError(f"ranks see different checkpoints in {run_dir}: {seen}")
    if env.is_main:
        for bad, reason in search.unreadable:
            instead = f"resuming from {search.path}" if search.path else "starting afresh"
            print(f"vidscale: warning: {bad} is unreadable ({reason}); {instead}", flush=True)
    start = resolve_start(
        cfg, search.state, world_size=env.world_size, train_size=train_size, source=str(search.path)
    )
    return dataclasses.replace(start, path=search.path, state=search.state)


def prepare_run_dir(run_dir: Path, cfg: RunConfig, start: Start, *, classes: list[str]) -> None:
    """Rank 0, at start: remove stale temporary files, write the config and class names, trim
    `metrics.jsonl` to the start (each step is logged once), and say where the run starts."""
    p = start.progress
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_tmp(run_dir / "checkpoints") + remove_stale_tmp(run_dir):
        print(f"vidscale: removed {stale} (left by an interrupted write)", flush=True)
    save_config(cfg, run_dir / "config.json")
    # The class names travel with the run, so predict/export need no dataset.
    atomic_write_text(run_dir / "classes.txt", "\n".join(classes) + "\n")
    bad = truncate_metrics(run_dir / "metrics.jsonl", step=p.step, epochs_done=p.epoch)
    if bad:
        print(f"vidscale: metrics.jsonl: dropped unreadable line(s) {bad}", flush=True)
    for note in start.notes:
        print(f"vidscale: {note}", flush=True)
    if start.path is not None:
        where = f"epoch {p.epoch + 1}, step {p.step}/{start.sizes.total_steps}"
        if p.epoch >= cfg.train.epochs:
            where = f"all {cfg.train.epochs} epochs done"
        print(f"vidscale: resuming {run_dir} from {start.path} ({where})", flush=True)
