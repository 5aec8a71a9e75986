"""Extract the pooled trunk features of many videos from one run; resumable, on 1 or N ranks.

The output `OUT` (.npz, `numpy.load(OUT)` needs no pickle) holds, one row per readable video
in listing order (`listing`):

- `features`: float32 (videos, F), the mean of the video's views' features;
- `clip_features`: float32 (videos, views, F), each view's feature, clip-major (views =
  clips x crops of the run's `data.eval_clip`, or `--clips` / `--crops`);
- `paths` (absolute), `labels` (class index, -1 when unknown), `splits` ("train", "val", or ""
  for files given by name), and `classes` (the dataset's class names, by index);
- `unreadable_paths`, `unreadable_reasons`: the videos left out;
- `meta`: a JSON string (run, checkpoint, model, views, the classifier replaced, and the
  `precision` the features were computed in: fp32 unless bf16 is asked for, `scoring.precision`).

A feature is the vector the run's classifier reads (`pooled`). Each view is sampled exactly as
`vidscale eval` and `predict` sample it (`predict.sample_views`). Under torchrun every rank
takes every N-th of the videos not yet finished, writes its chunks (`parts`), and rank 0
assembles the output once all are done: the rows and their order do not depend on the number
of ranks, nor on how often the run was interrupted.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vidscale.config import Precision, RunConfig
from vidscale.data.clip import ClipSpec
from vidscale.data.inputs import ModelInput
from vidscale.data.media.decode import DecodeError
from vidscale.distributed.collectives import all_gather_object, barrier, broadcast_object
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.errors import InputError
from vidscale.fastpath.threads import set_threads
from vidscale.features.listing import Listing, Plan, Split, dataset_items, file_items, make_plan
from vidscale.features.parts import ChunkWriter, assemble, finished_rows, open_parts, parts_dir
from vidscale.features.pooled import as_feature_extractor, classifier_name, view_features
from vidscale.predict import VIEWS_PER_FORWARD, LoadedRun, load_run, sample_views
from vidscale.run.metrics import progress
from vidscale.scoring.precision import Arithmetic, announce, scoring_arithmetic

FEATURE = "pooled trunk output before the classifier (the classifier replaced by the identity)"


@dataclass(frozen=True)
class ExtractOptions:
    """One extraction: `data` (a dataset root) or `videos` (files), never both."""

    run: Path
    out: Path
    checkpoint: str = "last"
    data: Path | None = None
    videos: tuple[Path, ...] = ()
    split: Split = "all"
    overrides: tuple[str, ...] = ()
    num_clips: int | None = None
    num_crops: int | None = None
    device: Literal["cpu", "cuda"] = "cpu"
    chunk: int = 32
    precision: Precision = "fp32"
    progress: bool = False


def extract_features(opts: ExtractOptions) -> dict[str, Any]:
    """Extract, continuing an interrupted extraction of the same plan; on rank 0 return the
    summary (`out`, `videos`, `dim`, `views`, `unreadable`, `already_done`, `seconds`), on
    other ranks {}. Every rank of a launch must call it."""
    started = time.monotonic()
    env = init_distributed(opts.device)
    loaded = load_run(opts.run, checkpoint=opts.checkpoint, device=env.device)
    arithmetic = scoring_arithmetic(opts.precision, env.device)
    announce(arithmetic, is_main=env.is_main)
    set_threads(loaded.cfg, env)
    spec = loaded.cfg.data.eval_clip
    spec = dataclasses.replace(
        spec,
        num_clips=opts.num_clips or spec.num_clips,
        num_crops=opts.num_crops or spec.num_crops,
    )
    loaded = dataclasses.replace(loaded, cfg=_with_eval_clip(loaded, spec))
    listing = _listing(opts)
    classifier = classifier_name(loaded.model, len(loaded.classes))
    as_feature_extractor(loaded.model, len(loaded.classes))
    plan = make_plan(
        opts.run,
        loaded.checkpoint,
        loaded.cfg.model.name,
        spec,
        listing,
        precision=arithmetic.precision,
    )
    todo, done = _claim(opts.out, plan, env)
    mine = todo[env.rank :: env.world_size]
    writer = ChunkWriter(parts_dir(opts.out), env.rank, opts.chunk)
    _extract_rows(
        loaded, plan, mine, writer, arithmetic=arithmetic, show=opts.progress and env.is_main
    )
    all_gather_object(len(mine))  # every rank's chunks are on disk past this point
    barrier()
    if not env.is_main:
        return {}
    meta = {
        "run": plan.run,
        "checkpoint": plan.checkpoint,
        "model": plan.model,
        "views": plan.spec,
        "feature": FEATURE,
        "classifier": classifier,
        **arithmetic.report(),
    }
    result = assemble(opts.out, parts_dir(opts.out), plan, meta)
    return {
        "out": str(opts.out),
        **result,
        "already_done": done,
        "seconds": round(time.monotonic() - started, 3),
    }


def _with_eval_clip(loaded: LoadedRun, spec: ClipSpec) -> RunConfig:
    cfg = loaded.cfg
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, eval_clip=spec))


def _listing(opts: ExtractOptions) -> Listing:
    if (opts.data is None) == (not opts.videos):
        raise InputError("extract-features: give --data DIR or VIDEO files, not both or neither")
    if opts.data is not None:
        return dataset_items(opts.run, opts.data, split=opts.split, overrides=opts.overrides)
    return file_items(list(opts.videos))


def _claim(out: Path, plan: Plan, env: DistEnv) -> tuple[list[int], int]:
    """(the rows still to extract, in order; how many were finished before): rank 0 opens or
    checks `OUT.parts` and every rank gets its answer, or its one-line error."""
    answer: tuple[str, Any] = ("", None)
    if env.is_main:
        try:
            parts = open_parts(out, plan)
            done = finished_rows(parts)
            answer = ("ok", sorted(set(range(len(plan.listing.items))) - done))
        except (InputError, OSError) as err:
            answer = ("error", str(err))
    status, value = broadcast_object(answer)
    if status == "error":
        raise InputError(value)
    todo: list[int] = value
    done_count = len(plan.listing.items) - len(todo)
    if env.is_main and done_count:
        print(
            f"extract-features: resuming {parts_dir(out)}: {done_count} of "
            f"{len(plan.listing.items)} videos already done, skipping them; {len(todo)} to go",
            file=sys.stderr,
            flush=True,
        )
    return todo, done_count


def _extract_rows(
    loaded: LoadedRun,
    plan: Plan,
    rows: list[int],
    writer: ChunkWriter,
    *,
    arithmetic: Arithmetic,
    show: bool,
) -> None:
    """Extract `rows` of the plan in order into `writer`; an unreadable video is recorded as
    skipped with its reason (a `DecodeError`), never fatal."""
    spec = loaded.cfg.data.eval_clip
    model_input = ModelInput.of(spec, loaded.cfg.data)
    bar = progress(len(rows), enabled=show, desc="extract-features")
    bar.unit = "video"
    for row in rows:
        path = Path(plan.listing.items[row].path)
        try:
            views = sample_views(path, spec, flow=loaded.cfg.data.flow)
        except DecodeError as err:
            writer.skip(row, str(err))
        else:
            feats = view_features(
                loaded.model,
                views,
                model_input=model_input,
                views_per_forward=VIEWS_PER_FORWARD,
                autocast=arithmetic.autocast(),
            )
            writer.add(row, feats.numpy())
        bar.update(1)
    writer.flush()
    bar.close()
