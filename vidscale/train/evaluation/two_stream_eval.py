"""`vidscale eval --two-stream RGB_RUN FLOW_RUN`: each stream's accuracy and their late fusion.

The two-stream protocol (Simonyan & Zisserman; Cong et al. §II): the RGB and the optical-flow
networks are trained separately; at test time each scores its own samples of every video (the
paper: 5 samples during training's validation, 25 at the final test, `--clips 25`) and the
video's prediction is the weighted mean of the two streams' probabilities ("simple averaging";
TSN weighs flow 1.5). Both runs are evaluated on the videos both validation sets hold, paired on
the source video, through the evaluator (`scoring.evaluate.evaluate` with two `Stream`s), so the
numbers are the same exact, sharded evaluation as a single run's. Two multi-label runs
(`data.multi_label`) fuse their independent sigmoid probabilities the same way, each stream's
views aggregated by the RGB run's `data.eval_aggregate`, and are scored by mAP (fused and per
stream); a single-label and a multi-label run do not fuse.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from vidscale.config import ConfigError, Precision, RunConfig
from vidscale.data.dataset import VideoClipDataset
from vidscale.data.loaders import loader_options
from vidscale.data.paired import PairedDataset
from vidscale.data.samplers import ExactEvalSampler
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.models.registry import build_model
from vidscale.run.checkpoint import load_weights
from vidscale.run.data import load_data
from vidscale.run.ref import checkpoint_path, locate
from vidscale.scoring.average_precision import ViewAggregation
from vidscale.scoring.evaluate import EvalResult, Stream, evaluate
from vidscale.scoring.precision import announce, scoring_arithmetic
from vidscale.train import builders
from vidscale.train.evaluation.eval_run import Views, resolve_eval_config

STREAMS = ("rgb", "flow")


def stream_config(
    ref: Path, modality: str, *, views: Views | None, data: Path | None, overrides: list[str]
) -> tuple[Path, str, RunConfig]:
    """(run directory, checkpoint, resolved config) of one stream; its modality is checked."""
    run, checkpoint = locate(ref)
    cfg = resolve_eval_config(run, overrides=overrides, data=data)
    # Checked here, not in `config.validate`: it is the role the run is given that must fit.
    if cfg.data.eval_clip.modality != modality:
        raise ConfigError(
            f"{ref}: a {cfg.data.eval_clip.modality} run given as the {modality} stream"
        )
    if views is not None:
        cfg = replace(cfg, data=replace(cfg.data, eval_clip=views.apply(cfg.data.eval_clip)))
    return run, checkpoint, cfg


def evaluate_two_stream(
    rgb_run: Path,
    flow_run: Path,
    *,
    weights: tuple[float, float] = (1.0, 1.0),
    views: Views | None = None,
    checkpoint: str = "",
    data: tuple[Path | None, Path | None] = (None, None),
    overrides: list[str] | None = None,
    env: DistEnv | None = None,
    precision: Precision = "fp32",
) -> dict[str, Any]:
    """Top-1/top-5 of the fused prediction and each stream's top-1 (multi-label runs: the mAPs
    too, with top-1/top-5 as hit@1/hit@5), on the shared videos.

    `checkpoint` ("last", "best", an epoch name) applies to both runs; "" takes what each
    reference names (a run directory: its last checkpoint). `data` replaces each run's
    `data.root`; `views` each run's evaluation views. Both streams are scored in `precision`
    (`scoring.precision`; the report's `precision` says which).
    """
    if len(weights) != 2 or min(weights) < 0 or sum(weights) <= 0:
        raise ValueError(f"weights must be two numbers >= 0, not both 0: {weights}")
    env = env or init_distributed("auto")
    streams: list[Stream] = []
    datasets: dict[str, VideoClipDataset] = {}
    used: dict[str, str] = {}
    batch, workers = 1, 0
    labels: dict[str, RunConfig] = {}
    for name, ref, root, weight in zip(STREAMS, (rgb_run, flow_run), data, weights, strict=True):
        run, named, cfg = stream_config(
            Path(ref), name, views=views, data=root, overrides=list(overrides or [])
        )
        cfg, splits = load_data(cfg)
        model = build_model(replace(cfg.model, pretrained=None, init_from=""))
        path = checkpoint_path(run, checkpoint or named)
        load_weights(path, model, map_location="cpu")
        streams.append(Stream(model.to(env.device), builders.model_input(cfg), weight, name))
        datasets[name] = builders.build_eval_dataset(cfg, splits.val)
        used[name] = str(path)
        labels[name] = cfg
        if name == "rgb":
            batch = cfg.data.eval_batch_size or cfg.data.batch_size
            workers = cfg.data.workers
    multi_label = fused_labels(labels["rgb"], labels["flow"])
    paired = PairedDataset(datasets)
    loader = paired_loader(paired, env, batch=batch, workers=workers)
    # One arithmetic for both streams: the fused numbers are compared with each stream's own.
    arithmetic = scoring_arithmetic(precision, env.device)
    announce(arithmetic, is_main=env.is_main)
    autocast = arithmetic.autocast()
    result = evaluate(
        streams, loader, device=env.device, autocast=autocast, multi_label=multi_label
    )
    return {
        **arithmetic.report(),
        **two_stream_report(result, weights),
        "checkpoints": used,
        "only_in": paired.only_in,
    }


def two_stream_report(result: EvalResult, weights: tuple[float, float]) -> dict[str, Any]:
    """The scores of a fused evaluation, JSON-ready (mAPs only for multi-label runs)."""
    return {
        **({} if result.map is None else {"map": result.map, "stream_map": result.stream_map}),
        "weights": {"rgb": weights[0], "flow": weights[1]},
        "top1": result.top1,
        "top5": result.top5,
        "stream_top1": result.stream_top1,
        "gain_over_best_stream": result.top1 - max(result.stream_top1.values()),
        "videos": result.count,
        "unreadable": [{"path": p, "reason": r} for p, r in result.unreadable],
    }


def fused_labels(rgb: RunConfig, flow: RunConfig) -> ViewAggregation | None:
    """How the two runs' views combine for mAP (the RGB run's `data.eval_aggregate`), or None
    for two single-label runs; ConfigError when one run is multi-label and the other not."""
    if rgb.data.multi_label != flow.data.multi_label:
        kinds = {True: "multi-label", False: "single-label"}
        raise ConfigError(
            f"--two-stream: a {kinds[rgb.data.multi_label]} RGB run and a "
            f"{kinds[flow.data.multi_label]} flow run do not fuse"
        )
    return rgb.data.eval_aggregate if rgb.data.multi_label else None


def paired_loader(paired: PairedDataset, env: DistEnv, *, batch: int, workers: int) -> DataLoader:
    """This rank's share of the shared videos, each video once over the ranks."""
    return DataLoader(
        paired,
        batch_size=batch,
        sampler=ExactEvalSampler(len(paired), rank=env.rank, world_size=env.world_size),
        **loader_options(workers=workers, pin_memory=env.device.type == "cuda"),
    )
