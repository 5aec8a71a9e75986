"""Exact evaluation under data parallelism.

Each rank evaluates a disjoint slice of the validation set (`ExactEvalSampler`, no padding) and
the sums (loss, top-1 hits, top-5 hits, count) are all-reduced, so every sample counts exactly
once whatever the world size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vidscale.distributed.collectives import all_reduce_sum


@dataclass(frozen=True)
class EvalResult:
    top1: float  # percent
    top5: float  # percent
    loss: float
    count: int
    skipped: list[tuple[str, str]]


def topk_hits(logits: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """Number of rows whose label is among the top-k logits (k clipped to the class count)."""
    k = min(k, logits.shape[1])
    top = logits.topk(k, dim=1).indices
    return (top == labels[:, None]).any(dim=1).sum()


@torch.no_grad()
def evaluate(
    model: nn.Module,
    batches: Iterable[dict[str, Any]],
    *,
    prepare: Callable[[torch.Tensor], torch.Tensor],
    device: torch.device,
    autocast: Callable[[], Any],
) -> EvalResult:
    """Evaluate `model` on this rank's batches and reduce the sums over ranks.

    `prepare` turns a uint8 clip batch already on the device into the model's float input.
    """
    was_training = model.training
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top1, top5, count
    skipped: list[tuple[str, str]] = []
    for batch in batches:
        clips = prepare(batch["clip"].to(device, non_blocking=True))
        labels = batch["label"].to(device, non_blocking=True)
        with autocast():
            logits = model(clips)
        logits = logits.float()
        sums[0] += nn.functional.cross_entropy(logits, labels, reduction="sum").double()
        sums[1] += topk_hits(logits, labels, 1)
        sums[2] += topk_hits(logits, labels, 5)
        sums[3] += labels.numel()
        skipped.extend(batch.get("skipped", []))
    all_reduce_sum(sums)
    model.train(was_training)
    count = int(sums[3].item())
    denom = max(count, 1)
    return EvalResult(
        top1=100.0 * sums[1].item() / denom,
        top5=100.0 * sums[2].item() / denom,
        loss=sums[0].item() / denom,
        count=count,
        skipped=skipped,
    )
