"""`vidscale eval RUN`: evaluate a run's checkpoints with chosen test views; mean and std over
the last N.

The TSM paper reports accuracy as mean +- std over the last 5 epochs' checkpoints (§4,
"Baseline"), testing each video on 10 clips with the short side resized to 256 (§4, following
the non-local paper); the TSM code adds 3 crops of 256 x 256 along the long side
(`PAPER_VIEWS`). Runs as one process or under torchrun (exact sharded evaluation: every readable
video counts once; unreadable ones are counted in no accuracy and listed in the report). A
multi-label run (`data.multi_label`) is scored by mAP over its sigmoid scores, the views
aggregated by its `data.eval_aggregate`, and the report adds the mAP's mean and std. Every
score is computed in fp32 unless bf16 is asked for (`scoring.precision`), whatever the run
trained in; the report's `precision` names it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from vidscale.config import Precision
from vidscale.data.clip import ClipSpec
from vidscale.distributed.env import init_distributed
from vidscale.errors import InputError
from vidscale.fastpath.threads import set_threads
from vidscale.run.checkpoint import UnreadableCheckpoint, epoch_checkpoints, load_weights
from vidscale.run.data import load_data
from vidscale.run.record import read_record
from vidscale.run.ref import resolve_eval_config
from vidscale.scoring.average_precision import ViewAggregation
from vidscale.scoring.evaluate import Average, EvalResult, Stream, evaluate
from vidscale.scoring.precision import announce, scoring_arithmetic
from vidscale.train import builders


@dataclass(frozen=True)
class Views:
    """Test views per video: `num_clips` clips in time x `num_crops` (1 or 3) spatial crops.

    `short_side` and `crop_size` of 0 keep the run's evaluation values. `views_per_forward`
    caps the clips per model call (0: a whole batch of videos x views at once).
    """

    num_clips: int = 1
    num_crops: int = 1
    short_side: int = 0
    crop_size: int = 0
    average: Average = "logits"
    views_per_forward: int = 0

    def __post_init__(self) -> None:
        if self.num_clips < 1:
            raise ValueError(f"num_clips must be >= 1, got {self.num_clips}")
        if self.num_crops not in (1, 3):
            raise ValueError(f"num_crops must be 1 or 3, got {self.num_crops}")
        if self.short_side < 0 or self.crop_size < 0 or self.views_per_forward < 0:
            raise ValueError("short_side, crop_size and views_per_forward must be >= 0")
        if self.average not in ("logits", "softmax"):
            raise ValueError(f"average must be 'logits' or 'softmax', got {self.average!r}")

    @property
    def per_video(self) -> int:
        return self.num_clips * self.num_crops

    def apply(self, spec: ClipSpec) -> ClipSpec:
        """The evaluation clip spec with these views."""
        return replace(
            spec,
            num_clips=self.num_clips,
            num_crops=self.num_crops,
            short_side=self.short_side or spec.short_side,
            crop_size=self.crop_size or spec.crop_size,
        )


# The paper's test protocol: 10 clips x 3 full-height crops after resizing the short side to 256.
PAPER_VIEWS = Views(num_clips=10, num_crops=3, short_side=256, crop_size=256)


def evaluate_run(
    run_dir: Path,
    *,
    last: int = 1,
    overrides: list[str] | None = None,
    data: Path | None = None,
    views: Views | None = None,
    precision: Precision = "fp32",
    keep_scores: bool = False,
) -> dict[str, Any]:
    """Evaluate the last `last` epoch checkpoints of `run_dir`; top-1 (and for a multi-label run
    mAP) mean and std over them.

    `views` replaces the run's evaluation views (default: the run's `data.eval_clip` as saved).
    A checkpoint that does not load (truncated, damaged, refused by `weights_only`) is left out
    of the mean and listed in the report's `damaged`; when none loads, an `InputError` names
    them all. Scores are computed in `precision` whatever the run trained in (`scoring.precision`;
    the report's `precision` says which); the model keeps the memory layout the run recorded.
    `keep_scores` adds each row's `video_scores`: every scored video's probabilities by video.
    """
    run_dir = Path(run_dir)
    cfg = resolve_eval_config(run_dir, overrides=overrides, data=data)
    if views is not None:
        cfg = replace(cfg, data=replace(cfg.data, eval_clip=views.apply(cfg.data.eval_clip)))
    intact, damaged = split_damaged(last_checkpoints(run_dir, last))
    env = init_distributed(cfg.train.device)
    cfg, splits = load_data(cfg)
    set_threads(cfg, env)
    # The layout as the run trained (speed only); the arithmetic by the scoring rule.
    fast = builders.recorded_fast_path(cfg, env, intact[-1])
    arithmetic = scoring_arithmetic(precision, env.device)
    announce(arithmetic, is_main=env.is_main)
    model = builders.build_model(cfg, env, fast)
    loader = builders.build_eval_loader(cfg, env, splits.val)
    chosen = views or Views(
        num_clips=cfg.data.eval_clip.num_clips, num_crops=cfg.data.eval_clip.num_crops
    )
    scored, unloaded = score_checkpoints(
        intact,
        Stream(model, builders.model_input(cfg)),
        loader,
        device=env.device,
        autocast=arithmetic.autocast(),
        views=chosen,
        multi_label=cfg.data.eval_aggregate if cfg.data.multi_label else None,
        keep_scores=keep_scores,
    )
    damaged += unloaded
    if not scored:
        raise none_readable(damaged)
    paths, results = [p for p, _ in scored], [r for _, r in scored]
    report = summarize(paths, results, cfg.data.eval_clip, chosen, precision=precision)
    report["damaged"] = damaged_rows(damaged)
    if keep_scores:
        for row, result in zip(report["checkpoints"], results, strict=True):
            row["video_scores"] = by_video(result, splits.val)
    if cfg.data.multi_label:  # how the views' sigmoid scores were combined, not `average`
        report["views"]["aggregate"] = cfg.data.eval_aggregate
    return report


def last_checkpoints(run_dir: Path, last: int) -> list[Path]:
    """The run's newest `last` epoch checkpoints, oldest first; FileNotFoundError if none."""
    if last < 1:
        raise ValueError(f"last must be >= 1, got {last}")
    checkpoints = epoch_checkpoints(run_dir)[-last:]
    if not checkpoints:
        raise FileNotFoundError(f"no epoch checkpoints in {run_dir / 'checkpoints'}")
    return checkpoints


def score_checkpoints(
    paths: list[Path],
    stream: Stream,
    loader: Iterable[dict[str, Any]],
    *,
    device: torch.device,
    autocast: Callable[[], Any],
    views: Views,
    multi_label: ViewAggregation | None,
    keep_scores: bool = False,
) -> tuple[list[tuple[Path, EvalResult]], list[UnreadableCheckpoint]]:
    """Each checkpoint's weights loaded into `stream`'s model and evaluated: ([(path, result)],
    the errors of those whose weights did not load), in the order of `paths`."""
    scored: list[tuple[Path, EvalResult]] = []
    damaged: list[UnreadableCheckpoint] = []
    for path in paths:
        try:
            load_weights(path, stream.model, map_location=device)
        except UnreadableCheckpoint as err:  # its record read, its tensors did not
            damaged.append(err)
            continue
        result = evaluate(
            stream,
            loader,
            device=device,
            autocast=autocast,
            average=views.average,
            views_per_forward=views.views_per_forward,
            multi_label=multi_label,
            keep_scores=keep_scores,
        )
        scored.append((path, result))
    return scored, damaged


def by_video(result: EvalResult, items: list[Any]) -> dict[str, list[float]]:
    """`result`'s kept probabilities by the validation video they score: its path, or a
    prepared video's id."""
    names = [str(getattr(item, "path", None) or item.id) for item in items]
    return {names[i]: result.scores[i].tolist() for i in sorted(result.scores)}


def split_damaged(checkpoints: list[Path]) -> tuple[list[Path], list[UnreadableCheckpoint]]:
    """(the checkpoints that load, the errors of those that do not), in the given order; only
    each file's record is read (`record.read_record`: memory-mapped, its keys checked). None
    loading is `none_readable`'s error."""
    intact: list[Path] = []
    damaged: list[UnreadableCheckpoint] = []
    for path in checkpoints:
        try:
            read_record(path)
        except UnreadableCheckpoint as err:
            damaged.append(err)
        else:
            intact.append(path)
    if not intact:
        raise none_readable(damaged)
    return intact, damaged


def none_readable(damaged: list[UnreadableCheckpoint]) -> InputError:
    """The one-line error when no checkpoint asked for loads: the file's own error for one,
    every file and its reason for several."""
    if len(damaged) == 1:
        return damaged[0]
    listed = "; ".join(f"{err.path} ({err.reason})" for err in damaged)
    return InputError(f"none of the {len(damaged)} checkpoints loads: {listed}")


def damaged_rows(damaged: list[UnreadableCheckpoint]) -> list[dict[str, str]]:
    """The report's `damaged`: the checkpoints left out of the mean, as {"path", "reason"}."""
    rows = [{"path": str(err.path), "reason": err.reason} for err in damaged]
    return sorted(rows, key=lambda row: row["path"])


def summarize(
    checkpoints: list[Path],
    results: list[EvalResult],
    spec: ClipSpec,
    views: Views,
    *,
    precision: Precision,
) -> dict[str, Any]:
    """The JSON-ready report: one row per checkpoint, mean and sample std over them.

    `videos` is the number of readable videos every accuracy is over (each counted once),
    `listed` the number of videos in the validation list, and `unreadable` the videos left
    out, as `{"path", "reason"}` sorted by path (the union over checkpoints). Multi-label
    results add each row's `map` and `map_mean`, `map_std`, `map_chance` (top-1/top-5 are
    then hit@1/hit@5). `precision` is the arithmetic every score was computed in.
    """
    top1 = [r.top1 for r in results]
    top5 = [r.top5 for r in results]
    rows = [
        {"checkpoint": p.name, "top1": r.top1, "top5": r.top5, "loss": r.loss, "count": r.count}
        for p, r in zip(checkpoints, results, strict=True)
    ]
    maps = [r.map for r in results if r.map is not None]
    multi_label: dict[str, Any] = {}
    if maps:
        for row, r in zip(rows, results, strict=True):
            row["map"] = r.map
        multi_label = {
            "map_mean": statistics.fmean(maps),
            "map_std": statistics.stdev(maps) if len(maps) > 1 else 0.0,
            "map_chance": results[0].map_chance,
        }
    return {
        "checkpoints": rows,
        **multi_label,
        "top1_mean": statistics.fmean(top1),
        "top1_std": statistics.stdev(top1) if len(top1) > 1 else 0.0,
        "top5_mean": statistics.fmean(top5),
        "top5_std": statistics.stdev(top5) if len(top5) > 1 else 0.0,
        "videos": results[0].count,
        "listed": results[0].videos,
        "unreadable": [
            {"path": path, "reason": reason}
            for path, reason in sorted({item for r in results for item in r.unreadable})
        ],
        "views": {
            **asdict(views),
            "short_side": spec.short_side,
            "crop_size": spec.crop_size,
            "frames": spec.frames,
            "sampling": spec.sampling,
            "per_video": views.per_video,
        },
        "skipped": sorted({(p, reason) for r in results for p, reason in r.skipped}),
        "precision": precision,
    }
