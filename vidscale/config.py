"""The run configuration: one typed dataclass per component, composed into `RunConfig`.

Each component owns its config beside its code (`ModelConfig` in models/registry.py, `OptimConfig`
in optim/factory.py, ...); this module composes them, applies `--set section.field=value`
overrides with type checking, validates, and saves/loads the resolved config as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from vidscale.atomic import atomic_write_text
from vidscale.data.clip import ClipSpec
from vidscale.data.data_config import DataConfig as DataConfig
from vidscale.distributed.aavg.config import AAVGConfig
from vidscale.distributed.env import DistConfig
from vidscale.distributed.strategy import check_strategy_name
from vidscale.distributed.sync.comm_hooks import CommConfig
from vidscale.errors import ConfigError as ConfigError
from vidscale.models.registry import ModelConfig
from vidscale.optim.factory import OptimConfig
from vidscale.schedules.lr import LRConfig
from vidscale.schedules.multigrid_config import MultigridConfig

# The arithmetic a score is computed in (`scoring.precision`): one name for the trainer's
# evaluation and every command that scores videos.
Precision = Literal["fp32", "bf16"]


@dataclass
class TrainConfig:
    """The loop: how long, how often to evaluate and save, and the device fast path."""

    epochs: int = 100
    seed: int = 0
    eval_every: int = 1
    log_every: int = 10
    keep_checkpoints: int = 5
    checkpoint_every_steps: int = 0  # also save last.pt every N steps (0: epoch ends only)
    fast_path: bool = True  # master switch for amp / channels_last / compile below
    # auto: measured at start-up on this device and shape, fp32 unless bf16 / channels-last is
    # faster beyond the noise (fastpath/probe.py); a resumed run keeps its recorded choice
    amp: Literal["auto", "off", "bf16"] = "auto"
    channels_last: Literal["auto", "on", "off"] = "auto"
    # where "auto" decisions are cached: auto ($VIDSCALE_FAST_PATH_CACHE, else
    # ~/.cache/vidscale/fast_path.json), off, or a file path (fastpath/cache.py)
    fast_path_cache: str = "auto"
    compile: bool = False  # torch.compile the model
    # The arithmetic of the per-epoch evaluation (scoring/precision.py): fp32 whatever the
    # training's autocast, as `eval` and `predict` score, unless bf16 is asked for.
    eval_precision: Precision = "fp32"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    progress: bool = True
    threads: int = 0  # intra-op threads per process on CPU; 0: cores / local world size
    retain_host_memory: bool = True  # CPU fast path: glibc keeps freed memory (no page faults)
    # A step whose loss or gradient norm is not finite on any rank is skipped on every rank;
    # more than this many in a row stop the run (divergence, not a stray batch).
    max_bad_steps: int = 5
    # Hang watchdog (train/survival/watchdog.py): a step, evaluation batch or checkpoint that has not
    # finished within max(hang_floor_s, hang_factor x the slowest one so far) ends the rank
    # with its stacks written to RUN/hangs/; 0 in either disables it.
    hang_floor_s: float = 120.0
    hang_factor: float = 10.0
    # Resume under a changed global batch, epochs, LR or schedule: carry progress over as clips
    # seen instead of refusing (the resumed run is then not the run it would have been).
    allow_plan_change: bool = False
    # Where the run's scalars go besides metrics.jsonl (train/records/loggers.py), on rank 0. wandb
    # needs the `tracking` extra; offline it writes under the run directory and needs no
    # network (`wandb sync` uploads it later). wandb_dir "": the run directory.
    loggers: tuple[Literal["tensorboard", "wandb"], ...] = ("tensorboard",)
    wandb_project: str = "vidscale"
    wandb_mode: Literal["offline", "online"] = "offline"
    wandb_dir: str = ""


@dataclass
class RunConfig:
    """Everything a run needs; saved as `config.json` in every run directory."""

    recipe: str = ""
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    lr: LRConfig = field(default_factory=LRConfig)
    comm: CommConfig = field(default_factory=CommConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    aavg: AAVGConfig = field(default_factory=AAVGConfig)
    multigrid: MultigridConfig = field(default_factory=MultigridConfig)


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-ready dict of a (nested) config dataclass."""
    return dataclasses.asdict(cfg)


def save_config(cfg: RunConfig, path: Path) -> None:
    """Write the config atomically: other ranks and resumed runs read it while it is written."""
    atomic_write_text(path, json.dumps(to_dict(cfg), indent=2, sort_keys=False) + "\n")


def load_config(path: Path) -> RunConfig:
    data = json.loads(Path(path).read_text())
    return from_dict(RunConfig, data, prefix="")


def read_config_file(path: Path) -> RunConfig:
    """A run config written as JSON (a run's `config.json`, `vidscale recipes NAME --json`),
    validated.

    Any problem of the file is one `ConfigError` naming the file and, where there is one, the
    field: `my.json: data.batch_size: expected an integer, got 'x'`. A missing or unreadable
    file is the `OSError` of reading it.
    """
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not JSON: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object of config sections, got {data!r:.60}")
    try:
        cfg: RunConfig = from_dict(RunConfig, data, prefix="")
        validate(cfg)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    return cfg


def from_dict(cls: type, data: dict[str, Any], *, prefix: str) -> Any:
    """Build dataclass `cls` from a dict, converting each value to its field's type."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        where = prefix.rstrip(".") or "the run config"
        raise ConfigError(f"{prefix}{unknown[0]}: unknown field; known in {where}: {sorted(known)}")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _convert(value, hints[name], f"{prefix}{name}")
    return cls(**kwargs)


def apply_overrides(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """Return a copy of `cfg` with `section.field=value` overrides applied (values typed).

    Raises `ConfigError` naming the key for an unknown field or a value of the wrong type.
    """
    cfg = dataclasses.replace(cfg)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        _set_path(cfg, key.strip().split("."), raw.strip(), key.strip())
    return cfg


def _set_path(node: Any, parts: list[str], raw: str, key: str) -> None:
    for depth, part in enumerate(parts):
        if not dataclasses.is_dataclass(node):
            raise ConfigError(f"--set {key}: {'.'.join(parts[:depth])} is not a section")
        names = [f.name for f in dataclasses.fields(node)]
        if part not in names:
            where = ".".join(parts[:depth]) or "the run config"
            raise ConfigError(f"--set {key}: unknown field {part!r} in {where}; known: {names}")
        if depth == len(parts) - 1:
            hint = typing.get_type_hints(type(node))[part]
            value = _convert(_parse_raw(raw), hint, key)
            setattr(node, part, value)
            return
        child = dataclasses.replace(getattr(node, part))  # copy: never mutate shared defaults
        setattr(node, part, child)
        node = child


def _parse_raw(raw: str) -> Any:
    """Parse an override value: JSON when it parses (numbers, lists, true/null), else a string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        if "," in raw:
            return [_parse_raw(x) for x in raw.split(",")]
        return raw


def _convert(value: Any, hint: Any, key: str) -> Any:
    """Check and convert `value` to the annotated type `hint`; raise ConfigError naming `key`."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if isinstance(value, hint):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return from_dict(hint, value, prefix=key + ".")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"{key}: {value!r} matches none of {hint}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not one of {list(args)}")
        return value
    if origin is tuple:
        items = value if isinstance(value, (list, tuple)) else [value]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], key) for v in items)
        if len(items) != len(args):
            raise ConfigError(f"{key}: expected {len(args)} values, got {value!r}")
        return tuple(_convert(v, a, key) for v, a in zip(items, args, strict=True))
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off"):
            return value.lower() in ("true", "yes", "on")
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    if hint is Any:
        return value
    raise ConfigError(f"{key}: unsupported field type {hint}")


def validate(cfg: RunConfig) -> None:
    """Reject values that cannot work, with a one-line `ConfigError` naming the field.

    This is the config's one validation step: it runs where a config is resolved (`resolve`,
    which the CLI uses) and again by whatever builds a run from a config it did not resolve
    itself (the trainer, the studies), before anything is built. What needs facts of the run
    is checked where those facts are known: the world size and batch divisibility (the
    trainer's plan), the device (`distributed.env`), the data on disk and its class count
    (`data.loaders`).
    """
    for ok, message in [*_value_checks(cfg), *_clip_checks(cfg), *_combination_checks(cfg)]:
        if not ok:
            raise ConfigError(message)
    for spec_name in ("train_clip", "eval_clip"):
        try:
            getattr(cfg.data, spec_name).check(f"data.{spec_name}")
        except ValueError as err:
            raise ConfigError(str(err)) from err
    try:
        cfg.data.unreadable_limit()
    except ValueError as err:
        raise ConfigError(str(err)) from err
    try:  # names of registered parts: the registries list the known ones
        cfg.data.validate()
        check_strategy_name(cfg.dist.strategy)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    for section in ("optim", "lr", "comm", "dist", "aavg", "multigrid"):
        try:
            getattr(cfg, section).validate()
        except ValueError as err:
            raise ConfigError(f"{section}: {err}") from err


def resolve(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """`cfg` with `section.field=value` overrides applied, validated (`validate`)."""
    cfg = apply_overrides(cfg, overrides)
    validate(cfg)
    return cfg


Check = tuple[bool, str]


def _value_checks(cfg: RunConfig) -> list[Check]:
    """Ranges of single fields."""
    return [
        (cfg.data.batch_size >= 1, "data.batch_size must be >= 1"),
        (cfg.data.eval_batch_size >= 0, "data.eval_batch_size must be >= 0"),
        (cfg.data.workers >= 0, "data.workers must be >= 0"),
        (cfg.data.shuffle_buffer >= 1, "data.shuffle_buffer must be >= 1"),
        (cfg.data.shuffle_initial >= 1, "data.shuffle_initial must be >= 1"),
        (cfg.train.epochs >= 1, "train.epochs must be >= 1"),
        (cfg.train.eval_every >= 1, "train.eval_every must be >= 1"),
        (cfg.train.log_every >= 1, "train.log_every must be >= 1"),
        (cfg.train.keep_checkpoints >= 1, "train.keep_checkpoints must be >= 1"),
        (cfg.train.checkpoint_every_steps >= 0, "train.checkpoint_every_steps must be >= 0"),
        (cfg.train.threads >= 0, "train.threads must be >= 0"),
        (cfg.train.max_bad_steps >= 0, "train.max_bad_steps must be >= 0"),
        (cfg.train.hang_floor_s >= 0, "train.hang_floor_s must be >= 0 (0: no hang watchdog)"),
        (cfg.train.hang_factor >= 0, "train.hang_factor must be >= 0 (0: no hang watchdog)"),
        (
            len(set(cfg.train.loggers)) == len(cfg.train.loggers),
            f"train.loggers: {list(cfg.train.loggers)} names a logger twice",
        ),
        (cfg.train.wandb_project != "", "train.wandb_project must not be empty"),
        (cfg.model.num_classes >= 0, "model.num_classes must be >= 0 (0: from the class list)"),
        (0.0 <= cfg.model.dropout < 1.0, "model.dropout must be in [0, 1)"),
    ]


def _clip_checks(cfg: RunConfig) -> list[Check]:
    """The clip shapes, the model's input channels and the flow settings."""
    checks: list[Check] = []
    for spec_name in ("train_clip", "eval_clip"):
        spec: ClipSpec = getattr(cfg.data, spec_name)
        checks += [
            (spec.frames >= 1, f"data.{spec_name}.frames must be >= 1"),
            (spec.crop_size >= 8, f"data.{spec_name}.crop_size must be >= 8"),
            (
                spec.short_side >= spec.crop_size,
                f"data.{spec_name}.short_side must be >= crop_size",
            ),
            (spec.stride >= 1, f"data.{spec_name}.stride must be >= 1"),
            (spec.flow_stack >= 1, f"data.{spec_name}.flow_stack must be >= 1"),
        ]
    train, val = cfg.data.train_clip, cfg.data.eval_clip
    return [
        *checks,
        (
            (train.modality, train.channels) == (val.modality, val.channels),
            "data.eval_clip.modality and flow_stack must match data.train_clip's "
            f"({train.modality}, {train.flow_stack})",
        ),
        (
            cfg.model.in_channels == train.channels,
            f"model.in_channels={cfg.model.in_channels} but data.train_clip gives "
            f"{train.channels} channels ({train.modality}"
            + (f", {train.flow_stack} stacked flows" if train.modality == "flow" else "")
            + ")",
        ),
        (cfg.data.flow.short_side >= 0, "data.flow.short_side must be >= 0 (0: as decoded)"),
        (cfg.data.flow.bound > 0, "data.flow.bound must be > 0"),
    ]


def _combination_checks(cfg: RunConfig) -> list[Check]:
    """Settings of several sections that cannot go together."""
    if not cfg.multigrid.enabled:
        return []
    lr = cfg.lr
    return [
        (
            not cfg.aavg.adaptive_batch,
            "multigrid and aavg.adaptive_batch both set the batch size: choose one",
        ),
        (
            lr.schedule != "step" or lr.milestone_unit == "epoch",
            "multigrid needs lr.milestone_unit=epoch (its stages are epochs)",
        ),
        (
            lr.schedule != "poly",
            "multigrid has no polynomial LR policy: use lr.schedule=cosine or step",
        ),
    ]
