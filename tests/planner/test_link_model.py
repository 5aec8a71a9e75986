"""The planner's two-node step (`planner.link_model`): Eq. 1 of the TSM paper per bucket, the
overlap with backward, PowerSGD's compressed bytes and AAVG's averaging every K steps."""

from __future__ import annotations

import math

import pytest
import torch

from vidscale.distributed.sync.powersgd_hook import _powersgd_bytes
from vidscale.models.costs import model_costs
from vidscale.planner.link_model import LinkVariant, powersgd_bytes, predict_step, ring_seconds

MB = 1e6


def test_a_ring_of_two_sends_the_buffer_once_each_way() -> None:
    assert ring_seconds(
        40 * MB, procs=2, link_bytes_per_s=10 * MB, message_s=0.001
    ) == pytest.approx(4.001)
    # P nodes: 2(P-1)/P of the buffer
    assert ring_seconds(40 * MB, procs=4, link_bytes_per_s=10 * MB, message_s=0.0) == pytest.approx(
        6.0
    )
    assert ring_seconds(40 * MB, procs=1, link_bytes_per_s=10 * MB, message_s=0.001) == 0.0
    assert ring_seconds(40 * MB, procs=2, link_bytes_per_s=math.inf, message_s=0.002) == 0.002


class _Bucket:
    """What `_powersgd_bytes` reads of a DDP bucket: its gradients."""

    def __init__(self, shapes: list[tuple[int, ...]]) -> None:
        self._grads = [torch.zeros(s) for s in shapes]

    def gradients(self) -> list[torch.Tensor]:
        return self._grads


def test_powersgd_bytes_agree_with_the_hooks_own_count() -> None:
    shapes = [(64, 3, 7, 7), (64,), (128, 64, 3, 3), (10, 512), (3,)]
    for rank in (1, 2, 4):
        counted = _powersgd_bytes(_Bucket(shapes), rank=rank, compressing=True)  # type: ignore[arg-type]
        assert powersgd_bytes(shapes, rank=rank) == counted


def _predict(variant: LinkVariant, rate: float, *, step: float = 1.0, message_s: float = 0.0):  # type: ignore[no-untyped-def]
    costs = model_costs("tsm_resnet18", frames=2, size=32, num_classes=10)
    shapes = [(costs.params,)]
    return predict_step(
        costs,
        variant,
        one_process_s=step,
        procs=2,
        link_bytes_per_s=rate,
        bucket_mb=25.0,
        averaged_bytes=8.0 * costs.params,
        param_shapes=shapes,
        message_s=message_s,
    )


def test_a_fast_link_hides_ddp_behind_backward_and_a_slow_one_does_not() -> None:
    ddp = LinkVariant("ddp")
    fast, slow = _predict(ddp, 1e12), _predict(ddp, 10 * MB)
    assert fast.comm_s < 0.01 and fast.step_s == pytest.approx(1.0, abs=0.01)
    grads = model_costs("tsm_resnet18", frames=2, size=32, num_classes=10).params * 4
    # At 10 MB/s the all-reduces outlast backward by far: about all of them is exposed.
    assert slow.comm_s == pytest.approx(grads / (10 * MB) - 2 / 3, rel=0.1)
    assert (
        _predict(LinkVariant("ddp", "bf16"), 10 * MB).comm_s < 0.6 * slow.comm_s
    )  # half the bytes


def test_aavg_pays_one_averaging_every_k_steps() -> None:
    k4, k16 = (
        _predict(LinkVariant("aavg", k=4), 10 * MB),
        _predict(LinkVariant("aavg", k=16), 10 * MB),
    )
    params = model_costs("tsm_resnet18", frames=2, size=32, num_classes=10).params
    assert k4.comm_s == pytest.approx(8.0 * params / (10 * MB) / 4, rel=1e-6)
    assert k16.comm_s == pytest.approx(k4.comm_s / 4, rel=1e-6)
    assert k4.bytes_per_step == pytest.approx(8.0 * params / 4)


def test_per_message_costs_add_up_per_collective() -> None:
    aavg = _predict(LinkVariant("aavg", k=4), math.inf, message_s=0.003)
    assert aavg.comm_s == pytest.approx(0.003 + 0.003 / 4)  # the agreement, then 1/4 averaging
