"""A finished or running training run on disk: its config, class names and checkpoints.

`RUN` arguments (predict, export, eval, `model.init_from`) accept a run directory or a
checkpoint file inside one (`locate`); a checkpoint is named as a path, "last", "best" or an
epoch ("epoch_0016").
"""

from __future__ import annotations

from pathlib import Path

from vidscale.config import ConfigError, RunConfig, apply_overrides, load_config
from vidscale.data.annotations import read_class_names
from vidscale.run.checkpoint import CHECKPOINT_PATTERN, epoch_checkpoints
from vidscale.run.metrics import read_metrics


def resolve_path(root: str, name: str) -> Path:
    """`name` under `root` unless it is absolute."""
    p = Path(name)
    return p if p.is_absolute() else Path(root) / p


def checkpoint_path(run: Path, checkpoint: str) -> Path:
    """`checkpoint` as a file: an existing path, "best" (the epoch checkpoint with the highest
    validation top-1, or mAP, in RUN/metrics.jsonl), or a name in RUN/checkpoints ("last", "epoch_0016",
    with or without ".pt")."""
    given = Path(checkpoint)
    if given.suffix == ".pt" and given.is_file():
        return given
    if checkpoint == "best":
        return best_checkpoint(run)
    path = Path(run) / "checkpoints" / (given.stem + ".pt")
    if not path.is_file():
        found = sorted(p.stem for p in (Path(run) / "checkpoints").glob("*.pt"))
        raise FileNotFoundError(f"{path}: no such checkpoint; the run has {found or 'none'}")
    return path


def best_checkpoint(run: Path) -> Path:
    """The kept epoch checkpoint whose epoch scored the highest validation top-1, or mAP for a
    multi-label run (its epoch records carry `val_map`); the later epoch on a tie."""
    epochs = [r for r in read_metrics(Path(run) / "metrics.jsonl") if r.get("kind") == "epoch"]
    key = "val_map" if any("val_map" in r for r in epochs) else "val_top1"
    scores = {int(r["epoch"]): float(r[key]) for r in epochs if key in r}
    kept = {
        int(m.group(1)): p
        for p in epoch_checkpoints(Path(run))
        if (m := CHECKPOINT_PATTERN.search(p.name))
    }
    ranked = sorted((scores[e], e) for e in kept if e in scores)
    if not ranked:
        raise FileNotFoundError(
            f"{run}: no kept epoch checkpoint has a validation score in metrics.jsonl ('best')"
        )
    return kept[ranked[-1][1]]


def locate(ref: Path) -> tuple[Path, str]:
    """A run directory or a checkpoint file as (run directory, checkpoint): a directory means
    its last checkpoint; a file's run is the directory holding `checkpoints/` (or the file)."""
    ref = Path(ref)
    if ref.is_dir():
        run, checkpoint = ref, "last"
    elif ref.is_file():
        run = ref.parent.parent if ref.parent.name == "checkpoints" else ref.parent
        checkpoint = str(ref)
    else:
        raise FileNotFoundError(f"{ref}: neither a run directory nor a checkpoint file")
    if not (run / "config.json").is_file():
        raise FileNotFoundError(f"{ref}: no config.json in the run directory {run}")
    return run, checkpoint


def class_names(run: Path, cfg: RunConfig) -> list[str]:
    """RUN/classes.txt, else the run's dataset class list (`data.root` / `data.classes`)."""
    saved = Path(run) / "classes.txt"
    if saved.is_file():
        return read_class_names(saved)
    path = resolve_path(cfg.data.root, cfg.data.classes)
    if not cfg.data.root or not path.is_file():
        raise FileNotFoundError(
            f"no class names: {saved} is missing and the run's class list {path} is not there"
        )
    return read_class_names(path)


def run_config(run: Path) -> RunConfig:
    """RUN/config.json; a missing or malformed one is a `ConfigError` naming the file."""
    path = Path(run) / "config.json"
    if not path.is_file():
        raise ConfigError(f"{run}: not a training run (no config.json)")
    try:
        return load_config(path)
    except ValueError as err:  # malformed JSON, or fields this version does not know
        raise ConfigError(f"{path}: {err}") from err


def resolve_eval_config(
    run_dir: Path, *, overrides: list[str] | None = None, data: Path | None = None
) -> RunConfig:
    """The run's saved config with `data.root=data` (if given) and `--set` overrides applied.

    A missing or malformed RUN/config.json is a `ConfigError` naming the file.
    """
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: not a training run (no config.json)")
    try:
        cfg = load_config(path)
    except ValueError as err:  # malformed JSON, or fields this version does not know
        raise ConfigError(f"{path}: {err}") from err
    extra = list(overrides or [])
    if data is not None:
        extra.insert(0, f"data.root={data}")
    return apply_overrides(cfg, extra)
