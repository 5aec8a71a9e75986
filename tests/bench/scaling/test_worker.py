"""`bench scaling`'s ranks train the one benchmark subject (`fastpath.subject.Subject`) through the
strategy's wrapper: the subjects' weights on every rank, the benches' SGD, and every step agreed
over the whole group, on batches from the trainer's loader recipe."""

from __future__ import annotations

import functools
from typing import Any

import torch

from tests.distributed.multiproc import run_ranks
from vidscale.bench.scaling.config import ScalingConfig, Variant
from vidscale.distributed.env import DistEnv
from vidscale.fastpath.settings import Candidate
from vidscale.fastpath.subject import Subject
from vidscale.models.registry import build_model
from vidscale.step.fixed_batch import BENCH_LR, SGD_MOMENTUM, SGD_WEIGHT_DECAY

CFG = ScalingConfig(
    models=("tsm_resnet18",), batch=2, frames=2, size=16, num_classes=4, warmup=1, steps=1
)


def build_and_step(env: DistEnv) -> dict[str, Any]:
    """One rank: the worker's run under DDP, compared with a subject built here, then one step."""
    from vidscale.bench.scaling.worker import _build
    from vidscale.data.inputs import ModelInput

    run = _build(CFG, env, "tsm_resnet18", Variant("ddp"), Candidate(False, False))
    own = Subject.build(
        functools.partial(build_model, CFG.model_config("tsm_resnet18")),
        setting=Candidate(False, False),
        shape=CFG.probe_shape(),
        device=env.device,
    )
    same = all(
        torch.equal(a, b)
        for a, b in zip(
            run.subject.model.state_dict().values(), own.model.state_dict().values(), strict=True
        )
    )
    group = run.subject.optimizer.param_groups[0]
    result = run.subject.loaded(run.batches, prepare=ModelInput("rgb", 3), clips=CFG.batch)
    return {
        "same_weights": same,
        "sgd": (type(run.subject.optimizer).__name__, group["momentum"], group["weight_decay"]),
        "lr": result.lr,
        "clips": result.clips,
        "applied": run.subject.applied.applied,
        "wrapped": type(run.subject.forward).__name__,
    }


def test_every_rank_trains_the_one_subject_through_ddp() -> None:
    ranks = run_ranks(build_and_step, 2)
    for rank in ranks:
        assert rank == {
            "same_weights": True,
            "sgd": ("SGD", SGD_MOMENTUM, SGD_WEIGHT_DECAY),
            "lr": BENCH_LR,
            "clips": 2 * CFG.batch,  # the step's agreement counted both ranks' clips
            "applied": 1,
            "wrapped": "DistributedDataParallel",
        }
