"""`Checkpointer`: what a save writes, a load puts back (from the newest file that loads, past a
damaged one), rotation of epoch files, the stop path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from vidscale.config import ConfigError
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.distributed.strategy import build_strategy
from vidscale.distributed.sync.comm_hooks import CommConfig
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import newest_loadable
from vidscale.run.record import RunRecord
from vidscale.train.checkpoints.checkpointer import Checkpointer, RunState
from vidscale.train.checkpoints.resume import Progress
from vidscale.train.phases.adaptive_batch import AdaptiveBatch
from vidscale.train.phases.phase_switch import PhaseSwitch
from vidscale.train.records.run_log import RunLog
from vidscale.train.survival.resilience import DivergenceGuard, Preempted, StopSignals


def run_state(env: DistEnv, *, seed: int, classes: int = 5) -> RunState:
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv3d(3, 4, kernel_size=1),
        nn.BatchNorm3d(4),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(4, classes),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    strategy = build_strategy(env, CommConfig(), name="ddp")
    strategy.wrap(model, optimizer)
    cfg = get_recipe("demo_tsm_r18_8f_b32_e12")
    return RunState(
        model=model,
        optimizer=optimizer,
        strategy=strategy,
        progress=Progress(),
        run_log=RunLog(env, log_every=1, show_progress=False),
        guard=DivergenceGuard(max_bad_steps=3),
        adaptive=AdaptiveBatch.from_config(cfg, world_size=1, global_batch=8),
        phase_switch=PhaseSwitch(model, env),
    )


def checkpointer(run_dir: Path, parts: RunState, *, keep: int = 5) -> Checkpointer:
    record = RunRecord(model_name="tiny", num_classes=5)
    env = init_distributed("cpu")
    return Checkpointer(run_dir, env, parts, record=record, keep=keep, signals=StopSignals())


def train_a_step(parts: RunState) -> None:
    clips = torch.randn(2, 3, 2, 4, 4)
    parts.model(clips).sum().backward()
    parts.optimizer.step()
    parts.optimizer.zero_grad()
    parts.progress.step += 1
    parts.progress.step_in_epoch += 1
    parts.run_log.counters.steps += 1


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_load_falls_back_past_a_damaged_newest_file_and_restores_what_was_saved(
    tmp_path: Path,
) -> None:
    env = init_distributed("cpu")
    parts = run_state(env, seed=0)
    saver = checkpointer(tmp_path, parts)
    for _ in range(3):
        train_a_step(parts)
    parts.guard.consecutive = 1
    saver.save(epoch_end=True)
    saved_weights = weights(parts.model)
    saved_momentum = [
        parts.optimizer.state[p]["momentum_buffer"].clone() for p in parts.model.parameters()
    ]
    train_a_step(parts)
    parts.progress.epoch = 1
    saver.save(epoch_end=True)
    ckpt = tmp_path / "checkpoints"
    assert (ckpt / "last.pt").samefile(ckpt / "epoch_0001.pt")  # one file, two names
    (ckpt / "epoch_0001.pt").write_bytes(b"\0" * 64)  # damages both names

    search = newest_loadable(tmp_path)
    assert search.path == ckpt / "epoch_0000.pt"
    assert sorted(p.name for p, _ in search.unreadable) == ["epoch_0001.pt", "last.pt"]
    assert search.state is not None
    assert search.state["progress"] == {"epoch": 0, "step": 3, "step_in_epoch": 3}
    record = RunRecord.of(search.state, path=search.path)
    assert (record.model_name, record.num_classes) == ("tiny", 5)

    fresh = run_state(env, seed=1)
    loader = checkpointer(tmp_path, fresh)
    loader.load(search.state, exact=True, source=search.path)
    for key, value in weights(fresh.model).items():
        assert torch.equal(value, saved_weights[key]), key
    for p, want in zip(fresh.model.parameters(), saved_momentum, strict=True):
        assert torch.equal(fresh.optimizer.state[p]["momentum_buffer"], want)
    assert fresh.run_log.counters.steps == 3 and fresh.guard.consecutive == 1
    assert loader.last_good == f"{search.path} (step 3)"


def test_a_save_between_epochs_writes_last_pt_alone_and_epoch_files_rotate(
    tmp_path: Path,
) -> None:
    parts = run_state(init_distributed("cpu"), seed=0)
    saver = checkpointer(tmp_path, parts, keep=1)
    train_a_step(parts)
    saver.save(epoch_end=False)
    ckpt = tmp_path / "checkpoints"
    assert sorted(p.name for p in ckpt.iterdir()) == ["last.pt"]
    assert saver.last_good == f"{ckpt / 'last.pt'} (step 1)"
    saver.save(epoch_end=True)
    parts.progress.epoch = 1
    saver.save(epoch_end=True)
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch_0001.pt", "last.pt"]


def test_stop_checkpoints_where_the_run_is_and_raises_preempted(tmp_path: Path) -> None:
    parts = run_state(init_distributed("cpu"), seed=0)
    saver = checkpointer(tmp_path, parts)
    train_a_step(parts)
    train_a_step(parts)
    with pytest.raises(Preempted, match="stop signal on another rank at step 2"):
        saver.stop()
    search = newest_loadable(tmp_path)
    assert search.path == tmp_path / "checkpoints" / "last.pt"
    assert search.state is not None and search.state["progress"]["step"] == 2


def test_a_checkpoint_of_another_model_is_refused_by_name(tmp_path: Path) -> None:
    env = init_distributed("cpu")
    parts = run_state(env, seed=0)
    checkpointer(tmp_path, parts).save(epoch_end=False)
    search = newest_loadable(tmp_path)
    assert search.state is not None
    other = checkpointer(tmp_path, run_state(env, seed=0, classes=7))
    with pytest.raises(ConfigError, match="last.pt does not fit this run"):
        other.load(search.state, exact=True, source=search.path)
