"""The probe inside real training runs: it changes nothing but the setting (the same losses and
weights as the chosen setting forced), the run records it, and a resume reuses the record."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.tiny_run import tiny_overrides
from vidscale.config import RunConfig, apply_overrides
from vidscale.distributed.env import init_distributed
from vidscale.fastpath.probe import FastPathDecision
from vidscale.fastpath.settings import Candidate, hardware_rule
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import load_checkpoint, save_checkpoint
from vidscale.run.metrics import read_metrics
from vidscale.run.record import read_record
from vidscale.train import builders, loop


def config(root: Path, cache: Path | str, *extra: str) -> RunConfig:
    cfg = get_recipe("demo_tsm_r18_8f_b32_e12")
    sets = [*tiny_overrides(root), "data.batch_size=2", "train.epochs=2"]
    sets += [f"train.fast_path_cache={cache}", *extra]
    return apply_overrides(cfg, sets)


def forced(choice: FastPathDecision) -> list[str]:
    """The overrides that fix `choice`'s setting explicitly."""
    amp = "bf16" if choice.bf16 else "off"
    return [f"train.amp={amp}", f"train.channels_last={'on' if choice.channels_last else 'off'}"]


def recorded(path: Path) -> FastPathDecision:
    """The fast-path decision checkpoint `path` records."""
    decision = read_record(path).fast_path
    assert decision is not None, f"{path} records no fast path"
    return decision


def losses(run: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run / "checkpoints" / "last.pt")["model"]


@pytest.fixture(scope="module")
def auto_run(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-epoch run with `auto`, probed (its cache starts empty)."""
    base = tmp_path_factory.mktemp("auto")
    init_distributed("cpu")
    summary = loop.train(config(tiny_demo, base / "cache.json"), run_dir=base / "run")
    assert summary["fast_path_choice"]["source"] == "probe"
    assert (base / "cache.json").exists()
    return base / "run"


@pytest.mark.slow
def test_the_probe_changes_nothing_but_the_setting(
    auto_run: Path, tiny_demo: Path, tmp_path: Path
) -> None:
    choice = recorded(auto_run / "checkpoints" / "last.pt")
    assert choice.source == "probe" and choice.rounds > 0
    summary = loop.train(config(tiny_demo, "off", *forced(choice)), run_dir=tmp_path / "forced")
    assert summary["fast_path_choice"]["source"] == "explicit"
    assert losses(tmp_path / "forced") == losses(auto_run)
    probed, explicit = weights(auto_run), weights(tmp_path / "forced")
    assert probed.keys() == explicit.keys()
    assert all(torch.equal(probed[k], explicit[k]) for k in probed)


def test_a_resume_continues_with_the_recorded_setting_without_probing(
    auto_run: Path, tiny_demo: Path, tmp_path: Path
) -> None:
    run = tmp_path / "resumed"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(auto_run / "checkpoints" / "epoch_0001.pt", run / "checkpoints")
    unused = tmp_path / "cache.json"  # a probe would write it
    summary = loop.train(config(tiny_demo, unused), run_dir=run)
    choice = summary["fast_path_choice"]
    record = recorded(auto_run / "checkpoints" / "last.pt")
    assert choice["source"] == "checkpoint" and not unused.exists()
    assert (choice["bf16"], choice["channels_last"]) == (record.bf16, record.channels_last)
    second_epoch = losses(auto_run)[len(losses(auto_run)) // 2 :]
    assert losses(run) == second_epoch  # a new directory: its metrics start at the resume


def test_the_record_wins_over_a_new_measurement(
    auto_run: Path, tiny_demo: Path, tmp_path: Path
) -> None:
    run = tmp_path / "edited"
    (run / "checkpoints").mkdir(parents=True)
    source = auto_run / "checkpoints" / "epoch_0001.pt"
    state, record = load_checkpoint(source), read_record(source)
    measured = recorded(source).candidate
    other = Candidate(not measured.bf16, not measured.channels_last)
    edited = replace(record, fast_path=FastPathDecision(other.bf16, other.channels_last, "probe"))
    save_checkpoint({**state, **edited.state()}, run / "checkpoints" / "epoch_0001.pt")
    cfg = config(tiny_demo, tmp_path / "cache.json")
    env = init_distributed("cpu")
    trainer = loop.Trainer(cfg, run, env, resume="must")
    loop.stop_loader_workers(trainer)
    assert trainer.fast_choice.source == "checkpoint" and trainer.fast.candidate == other
    # `vidscale eval` of the run evaluates with the arithmetic it trained with.
    assert (
        builders.recorded_fast_path(cfg, env, run / "checkpoints" / "epoch_0001.pt").candidate
        == other
    )
    # A checkpoint written before decisions were recorded continues under the old rule.
    older = replace(record, fast_path=None).state()
    earlier = {k: v for k, v in state.items() if k not in record.state()} | older
    save_checkpoint(earlier, run / "checkpoints" / "epoch_0001.pt")
    assert read_record(run / "checkpoints" / "epoch_0001.pt") == replace(record, fast_path=None)
    trainer = loop.Trainer(cfg, run, env, resume="must")
    loop.stop_loader_workers(trainer)
    assert trainer.fast_choice.source == "hardware" and trainer.fast.candidate == hardware_rule(
        env.device
    )
    assert not (tmp_path / "cache.json").exists()
