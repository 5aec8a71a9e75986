"""Exact evaluation under data parallelism, with multi-view testing.

Each rank evaluates a disjoint slice of the validation set (`ExactEvalSampler`, no padding) and
the sums (loss, top-1 hits, top-5 hits, count) are all-reduced, so every readable video counts
exactly once whatever the world size. A video that cannot be read is not replaced in evaluation
(`VideoClipDataset` with `train=False` marks it unreadable and `collate` leaves it out of the
batch's rows): it is in none of the sums, and the result counts and names it, gathered over
ranks. The accuracy is therefore over exactly the readable videos, and `count` says how many.

Multi-view testing (TSM paper §4: "sample 10 clips per video and calculate the average
prediction"; the TSM code also takes 3 crops of the full-resolution frame): a batch clip of shape
(N, V, C, T, H, W) holds V views of each of N videos. The model runs on the N x V views as one
batch of clips (or in chunks of `views_per_forward`), and each video's prediction is the mean of
its V views' logits (`average="logits"`, the TSM code's default) or of their softmax
probabilities (`average="softmax"`). Accuracy and loss are computed on that per-video prediction,
so the count stays the number of videos.

Two-stream late fusion (Simonyan & Zisserman; Cong et al. §II: "simple averaging is used to
combine the predictions of the two streams"): each `Stream` (a model and the named input it
takes) scores its own views of the video, its per-video scores become probabilities, and the
video's prediction is their weighted mean. One stream is plain evaluation, bit for bit.

Multi-label evaluation (`multi_label="mean"|"max"`, the run's `data.eval_aggregate`): the batches
carry multi-hot `"targets"` (N, K); each view's scores are independent sigmoid probabilities,
combined per video by their mean or each class's maximum (`average_precision.aggregate_views`),
and several streams fuse by the weighted mean of those probabilities. Every readable video's
probabilities and targets are gathered from all ranks by dataset index, so the mean average
precision (`average_precision.mean_average_precision`) is computed on each video exactly once,
whatever the world size. The loss is the binary cross-entropy of the probabilities, and
`top1`/`top5` are hit@k: the share of videos with a positive among their k best classes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from vidscale.data.inputs import ModelInput
from vidscale.distributed.collectives import all_gather_object, all_reduce_sum
from vidscale.scoring.average_precision import (
    ViewAggregation,
    aggregate_views,
    mean_average_precision,
)

Average = Literal["logits", "softmax"]


@dataclass(frozen=True)
class EvalResult:
    """One evaluation over all ranks.

    `top1`, `top5` (percent) and `loss` (mean) are over the `count` readable videos (not
    views); with none readable they are 0.0. `videos` is how many listed videos were evaluated
    (`count` + the unreadable ones). `unreadable` names the videos left out, as (path, reason)
    from every rank, sorted and without repeats. `skipped` is this rank's read-failure reports
    as its batches carried them (in evaluation, its share of `unreadable`).
    """

    top1: float
    top5: float
    loss: float
    count: int
    skipped: list[tuple[str, str]]
    unreadable: list[tuple[str, str]]
    videos: int
    # with several streams: each stream's own top-1 (percent) by stream label
    stream_top1: dict[str, float] = field(default_factory=dict)
    # with keep_scores: every readable video's probabilities (K,) by dataset index, all ranks
    scores: dict[int, torch.Tensor] = field(default_factory=dict)
    # multi-label: the mean average precision (0..1) over the classes with a positive among the
    # readable videos (0.0 when none has), its chance level (those classes' mean positive
    # rate: the expected AP of a random ranking), and with several streams each stream's mAP
    map: float | None = None
    map_chance: float | None = None
    stream_map: dict[str, float] = field(default_factory=dict)

    @property
    def score(self) -> float:
        """The number a run is judged by, in percent: top-1, or the mAP of a multi-label run."""
        return self.top1 if self.map is None else 100.0 * self.map


@dataclass(frozen=True)
class Stream:
    """One network in an evaluation: its model, the named input it takes, its weight in the
    late fusion, and a label for reports (default: the input's name)."""

    model: nn.Module
    input: ModelInput
    weight: float = 1.0
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.input.name


def topk_hits(logits: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """Number of rows whose label is among the top-k logits (k clipped to the class count)."""
    k = min(k, logits.shape[1])
    top = logits.topk(k, dim=1).indices
    return (top == labels[:, None]).any(dim=1).sum()


def video_scores(
    model: nn.Module,
    clips: torch.Tensor,
    *,
    prepare: Callable[[torch.Tensor], torch.Tensor],
    autocast: Callable[[], Any],
    average: Average = "logits",
    views_per_forward: int = 0,
    multi_label: ViewAggregation | None = None,
) -> torch.Tensor:
    """Per-video float32 scores (N, K) of uint8 clips (N, C, T, H, W) or (N, V, C, T, H, W).

    One view: the logits. Several: the mean over views of the logits, or of the softmax
    probabilities (`average`). `views_per_forward` > 0 caps how many clips go through the model
    at once (the result is the same in eval mode; only peak memory changes). `multi_label`
    ("mean" or "max"): each view's sigmoid probabilities instead, aggregated so over views.
    """
    if clips.ndim not in (5, 6):
        raise ValueError(f"expected (N, C, T, H, W) or (N, V, C, T, H, W), got {clips.shape}")
    n = clips.shape[0]
    views_NV = clips.flatten(0, 1) if clips.ndim == 6 else clips
    step = views_per_forward if views_per_forward > 0 else max(len(views_NV), 1)
    parts = []
    for start in range(0, len(views_NV), step):
        with autocast():
            logits = model(prepare(views_NV[start : start + step]))
        parts.append(logits.float())
    logits_NV_K = torch.cat(parts)
    if multi_label is not None:
        views = clips.shape[1] if clips.ndim == 6 else 1
        return aggregate_views(logits_NV_K.sigmoid().view(n, views, -1), multi_label)
    if clips.ndim == 5:
        return logits_NV_K
    logits_N_V_K = logits_NV_K.view(n, clips.shape[1], -1)
    if average == "softmax":
        return logits_N_V_K.softmax(dim=-1).mean(dim=1)
    return logits_N_V_K.mean(dim=1)


def as_probabilities(scores: torch.Tensor, *, probabilities: bool) -> torch.Tensor:
    """Per-video probabilities from `video_scores` output (softmax of logits, or as they are)."""
    return scores if probabilities else scores.softmax(dim=-1)


def score_videos(
    streams: Sequence[Stream],
    inputs: Mapping[str, torch.Tensor],
    *,
    device: torch.device,
    autocast: Callable[[], Any],
    average: Average = "logits",
    views_per_forward: int = 0,
    multi_label: ViewAggregation | None = None,
) -> tuple[torch.Tensor, bool, list[torch.Tensor]]:
    """(scores (N, K), whether they are probabilities, each stream's scores) of a batch.

    One stream: its `video_scores` (probabilities only for multi-view softmax averaging, and
    always for `multi_label`). Several: the weighted mean of the streams' probabilities.
    """
    per_stream = []
    probabilities = []
    for stream in streams:
        clips = stream.input.take(inputs, device)
        per_stream.append(
            video_scores(
                stream.model,
                clips,
                prepare=stream.input.normalize,
                autocast=autocast,
                average=average,
                views_per_forward=views_per_forward,
                multi_label=multi_label,
            )
        )
        probabilities.append(multi_label is not None or (clips.ndim == 6 and average == "softmax"))
    if len(streams) == 1:
        return per_stream[0], probabilities[0], per_stream
    total = sum(s.weight for s in streams)
    fused = sum(
        (s.weight / total) * as_probabilities(scores, probabilities=p)
        for s, scores, p in zip(streams, per_stream, probabilities, strict=True)
    )
    assert isinstance(fused, torch.Tensor)
    return fused, True, per_stream


def _loss_sum(scores: torch.Tensor, labels: torch.Tensor, *, probabilities: bool) -> torch.Tensor:
    if probabilities:  # negative log of the averaged probability of the true class
        picked = scores.gather(1, labels[:, None]).clamp_min(1e-12)
        return -picked.log().sum().double()
    return nn.functional.cross_entropy(scores, labels, reduction="sum").double()


@torch.no_grad()
def evaluate(
    streams: Stream | Sequence[Stream],
    batches: Iterable[dict[str, Any]],
    *,
    device: torch.device,
    autocast: Callable[[], Any],
    average: Average = "logits",
    views_per_forward: int = 0,
    keep_scores: bool = False,
    multi_label: ViewAggregation | None = None,
) -> EvalResult:
    """Evaluate `streams` (one model, or several fused late) on this rank's batches and reduce
    the sums over ranks.

    Each stream takes its named input from a batch's `inputs` (uint8, (N, C, T, H, W), or
    (N, V, C, T, H, W) for V views per video: see `video_scores`); `count` is always the number
    of videos. A batch's `unreadable` reports (one per listed video it could not read; see
    `vidscale.data.dataset.collate`) are counted into `videos` and named in `unreadable`; a batch
    with no rows runs no forward pass. `keep_scores` returns every video's probabilities by
    index. `multi_label` ("mean" or "max": how views combine) scores multi-label batches, which
    must carry `"targets"`, by mAP (module docstring). Every rank must call this (it
    all-reduces and all-gathers).
    """
    if average not in ("logits", "softmax"):
        raise ValueError(f"average must be 'logits' or 'softmax', got {average!r}")
    streams = [streams] if isinstance(streams, Stream) else list(streams)
    if not streams:
        raise ValueError("nothing to evaluate: no streams")
    modes = [s.model.training for s in streams]
    for s in streams:
        s.model.eval()
    tally = _Tally(len(streams), device, keep_scores=keep_scores, multi_label=multi_label)
    for batch in batches:
        if tally.count_unreadable(batch):
            continue
        scores, probabilities, per_stream = score_videos(
            streams,
            batch["inputs"],
            device=device,
            autocast=autocast,
            average=average,
            views_per_forward=views_per_forward,
            multi_label=multi_label,
        )
        tally.add(batch, scores, probabilities=probabilities, per_stream=per_stream)
    all_reduce_sum(tally.sums)
    named, kept = _gathered(tally.unreadable, tally.kept if keep_scores else None)
    maps = _mean_aps(tally.ranked, streams) if multi_label is not None else None
    for s, mode in zip(streams, modes, strict=True):
        s.model.train(mode)
    return _result(
        tally.sums, streams, skipped=tally.skipped, unreadable=named, scores=kept, maps=maps
    )


class _Tally:
    """This rank's share of an evaluation, batch by batch: the `sums` (loss, top-1 hits, top-5
    hits, readable videos, unreadable videos, each stream's top-1 hits), the read failures, the
    kept probabilities, and for multi-label data each video's targets and scores by index."""

    def __init__(
        self,
        streams: int,
        device: torch.device,
        *,
        keep_scores: bool,
        multi_label: ViewAggregation | None,
    ) -> None:
        self.sums = torch.zeros(5 + streams, dtype=torch.float64, device=device)
        self.device, self.keep_scores, self.multi_label = device, keep_scores, multi_label
        self.skipped: list[tuple[str, str]] = []
        self.unreadable: list[tuple[str, str]] = []
        self.kept: dict[int, torch.Tensor] = {}
        self.ranked: dict[int, torch.Tensor] = {}  # index -> targets, scores, stream scores

    def count_unreadable(self, batch: dict[str, Any]) -> bool:
        """Note the batch's read failures; True when it has no readable video to score."""
        self.skipped.extend(batch.get("skipped", []))
        left_out = batch.get("unreadable", [])
        self.unreadable.extend(left_out)
        self.sums[4] += len(left_out)
        return bool(batch["label"].numel() == 0)

    def add(
        self,
        batch: dict[str, Any],
        scores: torch.Tensor,
        *,
        probabilities: bool,
        per_stream: Sequence[torch.Tensor],
    ) -> None:
        if self.multi_label is None:
            labels = batch["label"].to(self.device, non_blocking=True)
            _add_batch(
                self.sums, scores, labels, probabilities=probabilities, per_stream=per_stream
            )
        else:
            targets = _multi_hot(batch).to(self.device, non_blocking=True)
            _add_multi_label_batch(self.sums, scores, targets, per_stream=per_stream)
            rows = torch.stack([targets, scores, *(per_stream if len(per_stream) > 1 else [])], 1)
            self.ranked.update(zip(batch["index"].tolist(), rows.cpu(), strict=True))
        if self.keep_scores:
            probs = as_probabilities(scores, probabilities=probabilities).cpu()
            self.kept.update(zip(batch["index"].tolist(), probs, strict=True))


def _multi_hot(batch: dict[str, Any]) -> torch.Tensor:
    if "targets" not in batch:
        raise ValueError("a multi-label evaluation got a batch without multi-hot targets")
    targets: torch.Tensor = batch["targets"]
    return targets


def _gathered(
    unreadable: list[tuple[str, str]], kept: dict[int, torch.Tensor] | None
) -> tuple[list[tuple[str, str]], dict[int, torch.Tensor]]:
    """Every rank's unreadable videos (sorted, once each) and, when kept, every rank's scores;
    every rank must call this."""
    named = {
        (str(path), str(reason)) for part in all_gather_object(unreadable) for path, reason in part
    }
    if kept is None:
        return sorted(named), {}
    return sorted(named), {i: p for part in all_gather_object(kept) for i, p in part.items()}


def _add_batch(
    sums: torch.Tensor,
    scores: torch.Tensor,
    labels: torch.Tensor,
    *,
    probabilities: bool,
    per_stream: Sequence[torch.Tensor],
) -> None:
    """Add one batch's loss, top-1/top-5 hits, videos and each stream's top-1 hits (with
    several streams) to `sums` (laid out as in `evaluate`)."""
    sums[0] += _loss_sum(scores, labels, probabilities=probabilities)
    sums[1] += topk_hits(scores, labels, 1)
    sums[2] += topk_hits(scores, labels, 5)
    sums[3] += labels.numel()
    if len(per_stream) > 1:
        for j, stream_scores in enumerate(per_stream):
            sums[5 + j] += topk_hits(stream_scores, labels, 1)


def _add_multi_label_batch(
    sums: torch.Tensor,
    probs: torch.Tensor,
    targets: torch.Tensor,
    *,
    per_stream: Sequence[torch.Tensor],
) -> None:
    """`_add_batch` of a multi-label batch: `probs` (N, K) against multi-hot `targets`; the
    loss is each video's binary cross-entropy (mean over classes), the hits are hit@1, hit@5."""
    p = probs.double().clamp(1e-12, 1 - 1e-12)
    t = targets.double()
    bce = -(t * p.log() + (1 - t) * (1 - p).log()).mean(dim=1)
    sums[0] += bce.sum()
    sums[1] += _hits_at(probs, targets, 1)
    sums[2] += _hits_at(probs, targets, 5)
    sums[3] += len(targets)
    if len(per_stream) > 1:
        for j, stream_probs in enumerate(per_stream):
            sums[5 + j] += _hits_at(stream_probs, targets, 1)


def _hits_at(probs: torch.Tensor, targets: torch.Tensor, k: int) -> torch.Tensor:
    """Rows with a positive among their top-k classes (k clipped to the class count)."""
    top = probs.topk(min(k, probs.shape[1]), dim=1).indices
    return (targets.gather(1, top) > 0).any(dim=1).sum()


@dataclass(frozen=True)
class _MeanAPs:
    value: float
    chance: float
    streams: dict[str, float]


def _mean_aps(ranked: dict[int, torch.Tensor], streams: Sequence[Stream]) -> _MeanAPs:
    """The mAP of every rank's videos, each once (gathered by dataset index; a collective), its
    chance level and, with several streams, each stream's."""
    gathered = {i: rows for part in all_gather_object(ranked) for i, rows in part.items()}
    if not gathered:
        return _MeanAPs(0.0, 0.0, {})
    table = torch.stack([gathered[i] for i in sorted(gathered)])  # (N, 2 [+ S], K)
    targets = table[:, 0]
    scored = targets.sum(dim=0) > 0
    if not bool(scored.any()):
        return _MeanAPs(0.0, 0.0, {})
    chance = float(targets[:, scored].mean(dim=0).mean())
    by_stream = {
        s.name: mean_average_precision(table[:, 2 + j], targets).value
        for j, s in enumerate(streams)
        if table.shape[1] > 2
    }
    return _MeanAPs(mean_average_precision(table[:, 1], targets).value, chance, by_stream)


def _result(
    sums: torch.Tensor,
    streams: Sequence[Stream],
    *,
    skipped: list[tuple[str, str]],
    unreadable: list[tuple[str, str]],
    scores: dict[int, torch.Tensor],
    maps: _MeanAPs | None = None,
) -> EvalResult:
    """The metrics of all ranks' reduced `sums` (laid out as in `evaluate`) and, for a
    multi-label evaluation, its mean APs."""
    count = int(sums[3].item())
    denom = max(count, 1)
    return EvalResult(
        top1=100.0 * sums[1].item() / denom,
        top5=100.0 * sums[2].item() / denom,
        loss=sums[0].item() / denom,
        count=count,
        skipped=skipped,
        unreadable=unreadable,
        videos=count + int(sums[4].item()),
        stream_top1=(
            {s.name: 100.0 * sums[5 + j].item() / denom for j, s in enumerate(streams)}
            if len(streams) > 1
            else {}
        ),
        scores=scores,
        map=None if maps is None else maps.value,
        map_chance=None if maps is None else maps.chance,
        stream_map={} if maps is None else maps.streams,
    )
