"""`train_step`: one context in, a complete result out, checked against the same step computed
by hand (one full-batch cross-entropy, its gradient, one SGD update)."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from vidscale.data.inputs import ModelInput
from vidscale.step.run import StepContext, forward_backward, train_step

CLASSES = 3


class Float64(ModelInput):
    """The batch's RGB clips as float64 (the comparison is exact to rounding)."""

    def normalize(self, clips: torch.Tensor) -> torch.Tensor:
        return clips.double()


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 2 * 2 * 2, CLASSES)).double()


def clips_and_labels(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 2, 2, 2, generator=g), torch.randint(0, CLASSES, (n,), generator=g)


def micro_batches(clips: torch.Tensor, labels: torch.Tensor, size: int) -> Iterator[dict[str, Any]]:
    for i in range(0, len(labels), size):
        skipped = [(f"video{i}.mp4", "unreadable")]
        yield {
            "inputs": {"rgb": clips[i : i + size]},
            "label": labels[i : i + size],
            "skipped": skipped,
        }


def context(model: nn.Module, lr_optimizer: float = 0.0, **kwargs: Any) -> StepContext:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr_optimizer)
    return StepContext(
        model=model,
        optimizer=optimizer,
        prepare=Float64("rgb", 3),
        device=torch.device("cpu"),
        **kwargs,
    )


def test_a_step_of_two_micro_batches_is_one_full_batch_step_by_hand() -> None:
    clips, labels = clips_and_labels(6)
    reference = tiny_model()
    logits = reference(clips.double())
    loss = nn.functional.cross_entropy(logits, labels)
    loss.backward()
    # The step takes the cross-entropy in float32 (as under autocast): equal to float32 rounding.
    want_loss = float(loss.detach())
    grads = [p.grad.clone() for p in reference.parameters()]  # type: ignore[union-attr]
    grad_norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    expected = [p.detach() - 0.5 * g for p, g in zip(reference.parameters(), grads, strict=True)]
    hits = int((logits.argmax(dim=1) == labels).sum())

    model = tiny_model()
    result = train_step(
        context(model), micro_batches(clips, labels, 3), accumulate=2, clips=6, lr=0.5
    )

    assert result.loss == pytest.approx(want_loss, rel=1e-6)
    assert result.grad_norm == pytest.approx(grad_norm, rel=1e-6)
    assert (result.hits, result.count, result.clips, result.lr) == (hits, 6, 6, 0.5)
    assert result.agreed.loss == pytest.approx(want_loss, rel=1e-6)
    assert (result.agreed.hits, result.agreed.clips) == (hits, 6)
    assert result.agreed.finite and not result.agreed.stop
    assert result.skipped == [("video0.mp4", "unreadable"), ("video3.mp4", "unreadable")]
    assert result.seconds >= result.wait_s >= 0.0
    for got, want in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(got.detach(), want, rtol=0, atol=1e-7)
        assert got.grad is None  # zeroed for the next step


def test_the_lr_is_set_on_every_group_and_the_clips_count_every_rank() -> None:
    clips, labels = clips_and_labels(4)
    ctx = context(tiny_model())
    result = train_step(ctx, micro_batches(clips, labels, 4), accumulate=1, clips=4, lr=0.25)
    assert [g["lr"] for g in ctx.optimizer.param_groups] == [0.25]
    assert result.clips == 4


def test_a_non_finite_step_changes_no_weight_and_says_so() -> None:
    clips, labels = clips_and_labels(4)
    clips[1] = float("nan")
    model = tiny_model()
    before = copy.deepcopy(model.state_dict())
    result = train_step(
        context(model), micro_batches(clips, labels, 2), accumulate=2, clips=4, lr=0.5
    )
    assert not result.agreed.finite and math.isnan(result.loss)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])
    assert all(p.grad is None for p in model.parameters())


def test_a_stop_request_is_read_once_the_step_ran() -> None:
    clips, labels = clips_and_labels(4)
    asked = {"stop": False}

    def stop_requested() -> bool:
        return asked["stop"]

    def loading() -> Iterator[dict[str, Any]]:
        for batch in micro_batches(clips, labels, 2):
            yield batch
            asked["stop"] = True  # a signal arrives during the step

    ctx = context(tiny_model(), stop_requested=stop_requested)
    result = train_step(ctx, loading(), accumulate=2, clips=4, lr=0.1)
    assert result.agreed.stop and result.agreed.finite


def test_gradients_synchronise_on_the_last_micro_batch_only() -> None:
    clips, labels = clips_and_labels(6)
    lasts: list[bool] = []

    def micro_batch(*, last: bool) -> contextlib.AbstractContextManager[None]:
        lasts.append(last)
        return contextlib.nullcontext()

    ctx = context(tiny_model(), micro_batch=micro_batch)
    train_step(ctx, micro_batches(clips, labels, 2), accumulate=3, clips=6, lr=0.1)
    assert lasts == [False, False, True]


def test_forward_backward_runs_the_model_inside_the_autocast() -> None:
    """As a bench runs it: the model in bfloat16 under the CPU autocast, the loss in float32."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(24, CLASSES))
    dtypes: list[torch.dtype] = []
    model.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    ctx = StepContext(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.0),
        prepare=ModelInput("rgb", 3),
        device=torch.device("cpu"),
        autocast=lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    )
    clips, labels = clips_and_labels(4)
    batch: dict[str, Any] = {
        "inputs": {"rgb": (clips * 40 + 128).clamp(0, 255).to(torch.uint8)},
        "label": labels,
    }
    part = forward_backward(ctx, batch, clips=8)
    assert dtypes == [torch.bfloat16]
    assert part.count == 4 and 0 <= part.hits <= 4
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ctx.prepare(batch["inputs"], ctx.device))
    mean = nn.functional.cross_entropy(logits.float(), labels)
    assert part.loss == pytest.approx(float(mean) * 4 / 8, rel=1e-6)  # its share of 8 clips
