"""Multigrid runs of the training loop (Wu et al.): 2 real gloo processes on the same shapes at
every iteration through long- and short-cycle phases, sub-batch BN, and an exact resume in the
middle of a phase's short cycle."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.distributed.multiproc import run_ranks
from tests.tiny_run import tiny_overrides
from tests.train.survival.test_resilience import dies_after, losses, records
from vidscale.config import RunConfig, apply_overrides
from vidscale.data.prepared.prepare import prepare_from_layout
from vidscale.data.synthetic.videos import write_synthetic_dataset
from vidscale.distributed.sync_batchnorm import GroupSyncBatchNorm
from vidscale.models.batchnorm import SubBatchNorm2d
from vidscale.recipes import get_recipe
from vidscale.run.timeline import make_timeline, run_sizes
from vidscale.train import loop


@pytest.fixture(scope="module")
def demo64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 training videos: room for a multigrid stage's large batches on 2 ranks."""
    root = tmp_path_factory.mktemp("demo64")
    write_synthetic_dataset(root, seed=3, train_per_class=8, val_per_class=1, size=32, num_frames=8)
    return root


def multigrid_config(root: Path, *extra: str) -> RunConfig:
    """Base shape 4 frames x 32^2, 2 clips per process; two long-cycle stages (2 frames x 23^2
    at 4x the batch, then the base shape), both with the short cycle; BN over 2 clips, so the
    first stage runs sub-batch BN in 4 groups; 2 x 1.5 = 3 epochs."""
    return apply_overrides(
        get_recipe("demo_tsm_r18_8f_multigrid_b32_e10"),
        [
            *tiny_overrides(root),
            "data.batch_size=2",
            "optim.simulate_world_size=0",
            "train.epochs=2",
            "multigrid.long_cycle_factors=[[0.5, 0.7071067811865476], [1.0, 1.0]]",
            "multigrid.bn_base_size=2",
            "multigrid.precise_bn_batches=2",
            *extra,
        ],
    )


def test_the_test_schedule_has_two_phases_with_short_cycles(demo64: Path) -> None:
    cfg = multigrid_config(demo64)
    timeline = make_timeline(cfg, run_sizes(cfg, world_size=2, train_size=64))
    first, second = timeline.phases
    assert [(s.frames, s.crop, s.micro_batch) for s in first.shapes] == [
        (2, 16, 16),
        (2, 23, 8),
        (2, 23, 8),
    ]
    assert (first.bn_mode, first.bn_splits, first.steps_per_epoch) == ("sub_batchnorm", 4, 3)
    assert [(s.frames, s.crop, s.micro_batch) for s in second.shapes] == [
        (4, 16, 8),
        (4, 23, 4),
        (4, 32, 2),
    ]
    assert (second.bn_mode, second.steps_per_epoch) == ("batchnorm", 6)
    assert (first.epochs, second.epochs, timeline.epochs) == (2, 1, 3)


@pytest.fixture(scope="module")
def demo64_shards(demo64: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo64_shards")
    prepare_from_layout(
        "generic", demo64, out, workers=1, progress=False, short_side=0, shard_bytes=40_000
    )
    return out


def multigrid_run(env: Any, root: str, run: str, cut_after: int, *extra: str) -> dict[str, Any]:
    """The run, with every forward's input shape recorded; with `cut_after` it dies after that
    many steps (checkpoints after every step) and the same command continues it."""
    cfg = multigrid_config(Path(root), "train.checkpoint_every_steps=1", *extra)
    if cut_after:
        with dies_after(cut_after), contextlib.suppress(KeyboardInterrupt):
            loop.Trainer(cfg, Path(run), env).run()
    trainer = loop.Trainer(cfg, Path(run), env)
    shapes: list[tuple[int, ...]] = []
    trainer.model.register_forward_pre_hook(
        lambda module, args: (
            shapes.append(tuple(args[0].shape)) if torch.is_grad_enabled() else None
        )
    )
    sub_bn: list[int] = []
    sync_bn: list[int] = []
    real_step = loop.train_step

    def step_counting_sub_bn(*args: Any, **kwargs: Any) -> Any:
        sub_bn.append(sum(isinstance(m, SubBatchNorm2d) for m in trainer.model.modules()))
        sync_bn.append(sum(isinstance(m, GroupSyncBatchNorm) for m in trainer.model.modules()))
        return real_step(*args, **kwargs)

    loop.train_step = step_counting_sub_bn  # type: ignore[assignment]
    try:
        summary = trainer.run()
    finally:
        loop.train_step = real_step  # type: ignore[assignment]
    return {
        "losses": losses(Path(run)),
        "shapes": shapes,
        "sub_bn": sub_bn,
        "sync_bn": sync_bn,
        "summary": summary,
        "phases": [(r["epoch"], r["bn_mode"]) for r in records(Path(run), "phase")],
        "final": [t.detach().clone() for t in trainer.model.state_dict().values()],
    }


# (N, C, T, H, W) of every training forward: 2 epochs of 3 steps, then 1 of 6.
SHAPES = [(16, 3, 2, 16, 16), (8, 3, 2, 23, 23), (8, 3, 2, 23, 23)] * 2 + [
    (8, 3, 4, 16, 16),
    (4, 3, 4, 23, 23),
    (2, 3, 4, 32, 32),
] * 2


@pytest.mark.slow
def test_two_ranks_follow_the_schedule_in_lock_step_and_resume_exactly(
    demo64: Path, tmp_path: Path
) -> None:
    full = run_ranks(multigrid_run, 2, str(demo64), str(tmp_path / "full"), 0, timeout=500)
    # Both ranks see the same shape at every iteration: 2 epochs of 3 steps, then 1 of 6.
    assert full[0]["shapes"] == full[1]["shapes"] == SHAPES
    assert full[0]["phases"] == [(0, "sub_batchnorm"), (2, "batchnorm")]
    # Sub-batch BN in the first phase (every BN of the trunk), plain BN in the second.
    assert len(set(full[0]["sub_bn"][:6])) == 1 and full[0]["sub_bn"][0] > 0
    assert full[0]["sub_bn"][6:] == [0] * 6
    summary = full[0]["summary"]
    assert summary["train_steps"] == 12 and summary["epochs"] == 3
    for a, b in zip(full[0]["final"], full[1]["final"], strict=True):
        assert torch.equal(a, b)
    # Killed in epoch 2 of the first phase after its 16^2 step (sub-batch BN: the groups'
    # running statistics come back from the checkpoint), and in the middle of the second
    # phase's short cycle (step 9 of 12): the same losses, accuracies and weights.
    for cut_after in (4, 9):
        cut = run_ranks(
            multigrid_run, 2, str(demo64), str(tmp_path / f"cut{cut_after}"), cut_after, timeout=500
        )
        assert cut[0]["losses"] == full[0]["losses"] and len(full[0]["losses"]) == 12
        assert cut[0]["summary"]["val_top1_history"] == summary["val_top1_history"]
        for a, b in zip(cut[0]["final"], full[0]["final"], strict=True):
            assert torch.equal(a, b)


@pytest.mark.cuda
def test_cuda_ranks_synchronise_batchnorm_where_the_batch_shrinks(
    demo64: Path, tmp_path: Path
) -> None:
    """BN over 4 clips: the first phase (8 clips per process) runs sub-batch BN in 2 groups, the
    second (2 clips per process) BN synchronised over both processes (2 ranks sharing one GPU
    over gloo where there is one); a run killed inside the synchronised phase continues it."""
    extra = "multigrid.bn_base_size=4"
    full = run_ranks(
        multigrid_run, 2, str(demo64), str(tmp_path / "full"), 0, extra, device="cuda", timeout=500
    )
    assert full[0]["shapes"] == full[1]["shapes"] == SHAPES
    assert full[0]["phases"] == [(0, "sub_batchnorm"), (2, "sync_batchnorm")]
    assert full[0]["sync_bn"][:6] == [0] * 6 and set(full[0]["sync_bn"][6:]) == {20}
    assert full[0]["sub_bn"][6:] == [0] * 6 and full[0]["sub_bn"][0] == 20
    for a, b in zip(full[0]["final"], full[1]["final"], strict=True):
        assert torch.equal(a, b)
    cut = run_ranks(
        multigrid_run, 2, str(demo64), str(tmp_path / "cut"), 9, extra, device="cuda", timeout=500
    )
    # cudnn's autotuned kernels may differ between processes: equal up to rounding.
    assert cut[0]["losses"] == pytest.approx(full[0]["losses"], rel=1e-3)
    assert cut[0]["summary"]["train_steps"] == 12 and cut[0]["phases"][-1] == (2, "sync_batchnorm")


@pytest.mark.slow
def test_a_streamed_dataset_follows_the_schedule_and_resumes_exactly(
    demo64_shards: Path, tmp_path: Path
) -> None:
    """Shards read front to back (`data.source=stream`): the loader workers make each batch
    at the shape the schedule asks for, on both ranks alike, and a run killed in the middle
    of a short cycle continues where it stopped."""
    stream = "data.source=stream"
    full = run_ranks(
        multigrid_run, 2, str(demo64_shards), str(tmp_path / "full"), 0, stream, timeout=500
    )
    assert full[0]["shapes"] == full[1]["shapes"] == SHAPES
    assert full[0]["summary"]["train_steps"] == 12
    for a, b in zip(full[0]["final"], full[1]["final"], strict=True):
        assert torch.equal(a, b)
    cut = run_ranks(
        multigrid_run, 2, str(demo64_shards), str(tmp_path / "cut"), 9, stream, timeout=500
    )
    assert cut[0]["losses"] == full[0]["losses"] and len(full[0]["losses"]) == 12
    assert cut[0]["summary"]["val_top1_history"] == full[0]["summary"]["val_top1_history"]
    for a, b in zip(cut[0]["final"], full[0]["final"], strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_one_process_lars_and_accumulation_with_both_cycles(demo64: Path, tmp_path: Path) -> None:
    """Beyond PySlowFast: the short cycle on one process, composed with gradient accumulation
    (2 micro-batches per step) and LARS."""
    cfg = multigrid_config(
        demo64, "optim.simulate_world_size=2", "optim.name=lars", "multigrid.precise_bn_batches=0"
    )
    timeline = make_timeline(cfg, run_sizes(cfg, world_size=1, train_size=64))
    assert all(p.accumulate == 2 for p in timeline.phases)
    summary = loop.train(cfg, run_dir=tmp_path / "run")
    assert summary["train_steps"] == timeline.total_steps == 12
    assert summary["bad_steps"] == [] and summary["epochs"] == 3
    shapes = [r["shapes"] for r in records(tmp_path / "run", "phase")]
    assert shapes[0] == [[2, 16, 16], [2, 23, 8], [2, 23, 8]]


def aavg_multigrid_run(env: Any, root: str, run: str) -> dict[str, Any]:
    cfg = multigrid_config(Path(root), "dist.strategy=aavg", "aavg.k=2", "optim.name=adamw")
    trainer = loop.Trainer(cfg, Path(run), env)
    summary = trainer.run()
    return {
        "summary": summary,
        "final": [t.detach().clone() for t in trainer.model.state_dict().values()],
        "syncs": [r["step"] for r in records(Path(run), "sync")],
    }


@pytest.mark.slow
def test_aavg_learners_follow_the_multigrid_schedule_together(demo64: Path, tmp_path: Path) -> None:
    r0, r1 = run_ranks(aavg_multigrid_run, 2, str(demo64), str(tmp_path / "run"), timeout=500)
    # K = 2 and every epoch end: epochs of 3, 3 and 6 steps.
    assert r0["syncs"] == [2, 3, 5, 6, 8, 10, 12]
    assert r0["summary"]["train_steps"] == 12
    for a, b in zip(r0["final"], r1["final"], strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_one_process_trains_pyslowfasts_short_side_jitter_through_both_cycles(
    demo64_shards: Path, tmp_path: Path
) -> None:
    """The SlowFast recipes' crop on the demo shards, streamed: every shape of both cycles cuts
    its clips from a short side in [round(32 x crop / 32), 40], and the run trains."""
    jitter = ("data.train_clip.crop=short_side_jitter", "data.train_clip.jitter=[32, 40]")
    cfg = multigrid_config(
        demo64_shards, "data.source=stream", *jitter, "multigrid.precise_bn_batches=0"
    )
    timeline = make_timeline(cfg, run_sizes(cfg, world_size=1, train_size=64))
    specs = [r.spec for p in timeline.phases for r in p.request_cycle(cfg.data.train_clip).cycle]
    small, middle = (16, (16, 40)), (23, (23, 40))  # the base shape (32^2) reads the base spec
    assert [(s.crop_size, s.jitter) for s in specs if s] == [small, middle, middle, small, middle]
    summary = loop.train(cfg, run_dir=tmp_path / "run")
    assert summary["train_steps"] == timeline.total_steps and summary["bad_steps"] == []
    shapes = [r["shapes"] for r in records(tmp_path / "run", "phase")]
    assert shapes == [[[2, 16, 16], [2, 23, 8], [2, 23, 8]], [[4, 16, 8], [4, 23, 4], [4, 32, 2]]]
    assert all(math.isfinite(loss) for loss in losses(tmp_path / "run"))
