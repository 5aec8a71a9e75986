"""AAVG runs of the training loop on 2 real gloo processes: exact resume between averagings,
identical replicas at evaluation and checkpoints, and the adaptive batch rule in lock-step
(Cong et al. Alg. 1 lines 12-21)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.distributed.multiproc import run_ranks
from tests.tiny_run import tiny_overrides
from tests.train.survival.test_resilience import dies_after, losses, records
from vidscale.config import RunConfig, apply_overrides
from vidscale.data.prepared.prepare import prepare_from_layout
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import load_checkpoint
from vidscale.scoring.evaluate import EvalResult
from vidscale.train import loop


def aavg_config(root: Path, *extra: str) -> RunConfig:
    """2 processes x 2 clips: global batch 4, 4 steps per epoch on the tiny demo's 16 videos."""
    cfg = get_recipe("demo_tsm_r18_8f_b32_e12")
    return apply_overrides(
        cfg,
        [
            *tiny_overrides(root),
            "data.batch_size=2",
            "optim.simulate_world_size=0",
            "dist.strategy=aavg",
            "train.epochs=2",
            *extra,
        ],
    )


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in model.state_dict().values()]


def aavg_run(env: Any, root: str, run: str, cut_after: int) -> dict[str, Any]:
    """K = 3 with a checkpoint after every step; with `cut_after` the run dies after that
    many steps (between averagings) and the same command continues it."""
    cfg = aavg_config(Path(root), "aavg.k=3", "train.checkpoint_every_steps=1")
    if cut_after:
        with dies_after(cut_after), contextlib.suppress(KeyboardInterrupt):
            loop.Trainer(cfg, Path(run), env).run()
    trainer = loop.Trainer(cfg, Path(run), env)
    summary = trainer.run()
    return {
        "losses": losses(Path(run)),
        "summary": summary,
        "final": params(trainer.model),
        "syncs": [(r["step"], r["comm_bytes"]) for r in records(Path(run), "sync")],
    }


@pytest.mark.slow
def test_aavg_resume_between_averagings_is_exact(tiny_demo: Path, tmp_path: Path) -> None:
    full = run_ranks(aavg_run, 2, str(tiny_demo), str(tmp_path / "full"), 0, timeout=400)
    cut = run_ranks(aavg_run, 2, str(tiny_demo), str(tmp_path / "cut"), 5, timeout=400)
    # Averagings after steps 3 and 4 (epoch end) of each epoch: 3, 4, 7, 8.
    assert [s for s, _ in full[0]["syncs"]] == [3, 4, 7, 8]
    assert full[0]["syncs"][0][1] > 0
    # Every rank ends with the same averaged model; the interrupted run with the same one.
    for a, b in zip(full[0]["final"], full[1]["final"], strict=True):
        assert torch.equal(a, b)
    assert cut[0]["losses"] == full[0]["losses"] and len(full[0]["losses"]) == 8
    assert cut[0]["summary"]["val_top1_history"] == full[0]["summary"]["val_top1_history"]
    for a, b in zip(cut[0]["final"], full[0]["final"], strict=True):
        assert torch.equal(a, b)
    s = full[0]["summary"]
    assert s["strategy"] == "aavg" and s["comm_rounds"] == 4 and s["comm_bytes"] > 0


def replica_at_step(env: Any, root: str, run: str) -> dict[str, Any]:
    """Stop after step 5 of 8 (K = 3: the last averaging was at step 4)."""
    cfg = aavg_config(Path(root), "aavg.k=3", "train.checkpoint_every_steps=5")
    trainer = loop.Trainer(cfg, Path(run), env)
    with dies_after(5), contextlib.suppress(KeyboardInterrupt):
        trainer.run()
    return {"own": params(trainer.model)}


@pytest.mark.slow
def test_a_checkpoint_between_averagings_holds_the_average_and_each_replica(
    tiny_demo: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    r0, r1 = run_ranks(replica_at_step, 2, str(tiny_demo), str(run))
    ckpt = load_checkpoint(run / "checkpoints" / "last.pt")
    assert ckpt["progress"]["step"] == 5
    for rank, r in enumerate((r0, r1)):
        own = load_checkpoint(run / "checkpoints" / f"last.rank{rank:04d}.comm.pt")["comm"]
        assert own["in_sync"] is False
        for a, b in zip(own["model"].values(), r["own"], strict=True):
            assert torch.equal(a, b)  # the rank's own replica, not the average
    mean = [(a + b) / 2 for a, b in zip(r0["own"], r1["own"], strict=True)]
    saved = list(ckpt["model"].values())
    first = next(i for i, t in enumerate(saved) if t.is_floating_point())
    torch.testing.assert_close(saved[first], mean[first], rtol=0, atol=1e-6)
    assert not torch.equal(r0["own"][first], r1["own"][first])  # the replicas had drifted


ACCURACY = [50.0, 40.0, 60.0, 55.0, 70.0]  # scripted evaluations, one per epoch


class ScriptedAccuracy(loop.Trainer):
    """The loop with its evaluation replaced by a scripted accuracy sequence."""

    def evaluate(self) -> EvalResult:
        with self.strategy.consensus():
            top1 = ACCURACY[self.progress.epoch]
        return EvalResult(top1, top1, 1.0, 1, [], [], 1)


def adaptive_run(env: Any, root: str, run: str, *extra: str) -> dict[str, Any]:
    cfg = aavg_config(
        Path(root),
        "aavg.k=-1",
        "aavg.adaptive_batch=true",
        "train.epochs=5",
        "optim.name=adamw",
        *extra,
    )
    trainer = ScriptedAccuracy(cfg, Path(run), env)
    seen: list[tuple[int, int, int, int]] = []
    real_epoch = trainer.train_epoch

    def epoch_with_sizes() -> None:
        start = trainer.progress.step
        real_epoch()
        data = trainer.train_data
        # The micro-batches the loader was asked for (a streamed dataset's workers make them).
        requests = data.batches.requests if data.batches else data.dataset.requests  # type: ignore[union-attr]
        size = requests[0].size
        seen.append((trainer.sizes.global_batch, size, trainer.progress.step - start, 0))

    trainer.train_epoch = epoch_with_sizes  # type: ignore[method-assign]
    summary = trainer.run()
    return {"seen": seen, "history": summary["batch_history"], "steps": trainer.progress.step}


@pytest.fixture(scope="module")
def tiny_demo_shards(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny_demo_shards")
    prepare_from_layout("generic", tiny_demo, out, workers=1, progress=False, short_side=0)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("source", ["videos", "stream"])
def test_adaptive_batch_doubles_where_the_rule_says_on_both_ranks(
    source: str, tiny_demo: Path, tiny_demo_shards: Path, tmp_path: Path
) -> None:
    """Alg. 1 lines 15-20 with b1 = 1, b2 = 2: the accuracy after epoch 2 (40 < a* = 50) and
    after epoch 4 (55 < 60) doubles the per-learner batch for the epochs that follow; also
    when shards are streamed (the loader workers make the grown batches)."""
    root = tiny_demo if source == "videos" else tiny_demo_shards
    run = str(tmp_path / "run")
    r0, r1 = run_ranks(adaptive_run, 2, str(root), run, f"data.source={source}", timeout=400)
    assert r0 == r1  # the same decisions, sizes and step counts on both ranks
    assert r0["history"] == [[0, 4], [2, 8], [4, 16]]
    # (global batch, loader batch per process, steps) per epoch: 16 videos per epoch.
    assert [s[:3] for s in r0["seen"]] == [(4, 2, 4), (4, 2, 4), (8, 4, 2), (8, 4, 2), (16, 8, 1)]
    assert r0["steps"] == 13
    batch = records(tmp_path / "run", "batch")
    assert [(r["epoch"], r["learner_batch"]) for r in batch] == [(2, 4), (4, 8)]
