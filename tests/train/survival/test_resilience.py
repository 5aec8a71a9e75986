"""Runs that survive, in one process: auto-resume, damaged files, the plan rule, non-finite steps.

Every check compares against an uninterrupted run of the same config (CPU, deterministic).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.tiny_run import tiny_overrides
from vidscale.config import ConfigError, RunConfig, apply_overrides
from vidscale.distributed.env import init_distributed
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import load_checkpoint
from vidscale.run.metrics import read_metrics
from vidscale.train import loop
from vidscale.train.survival.resilience import Diverged


def config(root: Path, *extra: str) -> RunConfig:
    cfg = get_recipe("demo_tsm_r18_8f_b32_e12")
    return apply_overrides(cfg, [*tiny_overrides(root), "train.epochs=2", *extra])


def train(cfg: RunConfig, run: Path, **kwargs: Any) -> dict[str, Any]:
    return loop.Trainer(cfg, run, init_distributed("cpu"), **kwargs).run()


def records(run: Path, kind: str) -> list[dict[str, Any]]:
    return [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == kind]


def losses(run: Path) -> list[float]:
    return [r["loss"] for r in records(run, "train")]


@pytest.fixture(scope="module")
def reference(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted 2-epoch run with a checkpoint after every step."""
    run = tmp_path_factory.mktemp("reference") / "run"
    train(config(tiny_demo, "train.checkpoint_every_steps=1"), run)
    return run


@contextlib.contextmanager
def dies_after(steps: int) -> Iterator[None]:
    """Runs inside the block die (as a killed process would) after `steps` optimizer steps."""
    real_step = loop.train_step
    calls = {"n": 0}

    def dying_step(*args: Any, **kwargs: Any) -> Any:
        if calls["n"] == steps:
            raise KeyboardInterrupt
        calls["n"] += 1
        return real_step(*args, **kwargs)

    loop.train_step = dying_step  # type: ignore[assignment]
    try:
        yield
    finally:
        loop.train_step = real_step  # type: ignore[assignment]


@pytest.mark.slow
def test_rerun_continues_exactly_and_a_finished_run_is_not_retrained(
    tiny_demo: Path, tmp_path: Path, reference: Path
) -> None:
    cfg = config(tiny_demo, "train.checkpoint_every_steps=1")
    run = tmp_path / "run"
    with dies_after(3), pytest.raises(KeyboardInterrupt):  # mid-epoch 2 (2 steps per epoch)
        train(cfg, run)
    summary = train(cfg, run)  # the same command again: auto-resume
    assert losses(run) == losses(reference)
    assert [r["step"] for r in records(run, "train")] == [1, 2, 3, 4]  # each step once
    # Epoch metrics are over the whole epoch although it ran in two attempts.
    exact = ("step", "epoch", "train_loss", "train_top1", "lr", "val_top1", "val_loss")
    assert [[r[k] for k in exact] for r in records(run, "epoch")] == [
        [r[k] for k in exact] for r in records(reference, "epoch")
    ]
    assert summary["val_top1"] == json.loads((reference / "summary.json").read_text())["val_top1"]
    before = (run / "metrics.jsonl").read_text()
    again = train(cfg, run)  # finished: nothing is trained, the summary is the same
    assert (run / "metrics.jsonl").read_text() == before
    assert again["val_top1_history"] == summary["val_top1_history"]
    assert again["train_steps"] == summary["train_steps"] == 4


def test_resume_never_and_must(tiny_demo: Path, tmp_path: Path, reference: Path) -> None:
    cfg = config(tiny_demo)
    with pytest.raises(ConfigError, match=f"--resume never: {reference} is not empty"):
        train(cfg, reference, resume="never")
    empty = tmp_path / "empty"
    with pytest.raises(ConfigError, match=f"--resume must: {empty} holds no loadable checkpoint"):
        train(cfg, empty, resume="must")


@pytest.mark.slow
def test_damaged_files_are_reported_and_resume_still_exact(
    tiny_demo: Path,
    tmp_path: Path,
    reference: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = config(tiny_demo, "train.checkpoint_every_steps=1")
    run = tmp_path / "run"
    with dies_after(3), pytest.raises(KeyboardInterrupt):
        train(cfg, run)
    ckpt = run / "checkpoints"
    (ckpt / "last.pt").write_bytes((ckpt / "last.pt").read_bytes()[:1000])  # truncated
    (ckpt / "last.pt.abc123.tmp").write_bytes(b"half a checkpoint")  # a killed save
    lines = len((run / "metrics.jsonl").read_text().splitlines())
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "train", "step": 4, "lo')  # a killed log write
    capsys.readouterr()
    train(cfg, run)
    out = capsys.readouterr().out
    assert f"{ckpt / 'last.pt'} is unreadable" in out and "epoch_0001.pt" in out
    assert f"removed {ckpt / 'last.pt.abc123.tmp'}" in out
    assert f"metrics.jsonl: dropped unreadable line(s) [{lines + 1}]" in out
    # Fell back to the end of epoch 1 and trained epoch 2 again: the same run.
    assert losses(run) == losses(reference)
    assert not list(ckpt.glob("*.tmp"))


def test_plan_change_is_refused_naming_the_field_unless_allowed(
    tiny_demo: Path, tmp_path: Path, reference: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.json", "metrics.jsonl"):
        (run / name).write_bytes((reference / name).read_bytes())
    (run / "checkpoints").mkdir()
    first = load_checkpoint(reference / "checkpoints" / "epoch_0001.pt")
    torch.save(first, run / "checkpoints" / "last.pt")
    with pytest.raises(ConfigError, match=r"train\.epochs 2 -> 3") as err:
        train(config(tiny_demo, "train.epochs=3"), run)
    assert "train.allow_plan_change=true" in str(err.value)
    with pytest.raises(
        ConfigError, match=r"lr\.warmup_epochs 1\.0 -> 2\.0; global batch 8 -> 16 \("
    ):
        train(config(tiny_demo, "data.batch_size=8", "lr.warmup_epochs=2"), run)
    with pytest.raises(ConfigError, match="holds another model: model.name"):
        train(config(tiny_demo, "model.name=tsn_resnet18"), run)
    allowed = train(config(tiny_demo, "train.epochs=3", "train.allow_plan_change=true"), run)
    assert allowed["train_steps"] == 6  # 2 steps carried over (16 clips) + 4 more
    assert [r["step"] for r in records(run, "train")] == [1, 2, 3, 4, 5, 6]


def nan_at(model: torch.nn.Module, steps: set[int]) -> None:
    """Make the model's training forward pass return NaN logits at the given (1-based) steps."""
    calls = {"n": 0}

    def hook(module: torch.nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor | None:
        if not module.training:
            return None
        calls["n"] += 1
        return output * float("nan") if calls["n"] in steps else None

    model.register_forward_hook(hook)


def test_non_finite_step_is_skipped_and_reported(tiny_demo: Path, tmp_path: Path) -> None:
    cfg = config(tiny_demo, "train.epochs=1", "optim.simulate_world_size=0")  # 4 steps
    trainer = loop.Trainer(cfg, tmp_path / "run", init_distributed("cpu"))
    nan_at(trainer.model, {2})
    before_step: list[dict[str, torch.Tensor]] = []  # weights and BN statistics at each step

    def snapshot(module: torch.nn.Module, args: Any) -> None:
        if module.training:
            before_step.append({k: v.clone() for k, v in module.state_dict().items()})

    trainer.model.register_forward_pre_hook(snapshot)
    summary = trainer.run()
    assert len(before_step) == 4
    changed = [
        any(not torch.equal(a[k], b[k]) for k in a) for a, b in itertools.pairwise(before_step)
    ]
    assert changed == [True, False, True]  # step 2 changed nothing, not even BN statistics
    assert summary["bad_steps"] == [2]
    assert [r["step"] for r in records(tmp_path / "run", "bad_step")] == [2]
    assert [r["step"] for r in records(tmp_path / "run", "train")] == [1, 3, 4]
    assert all(torch.isfinite(v).all() for v in trainer.model.state_dict().values())


def test_divergence_stops_naming_the_step_and_the_last_good_checkpoint(
    tiny_demo: Path, tmp_path: Path
) -> None:
    cfg = config(
        tiny_demo,
        "optim.simulate_world_size=0",
        "train.max_bad_steps=1",
        "train.checkpoint_every_steps=2",
    )
    run = tmp_path / "run"
    trainer = loop.Trainer(cfg, run, init_distributed("cpu"))
    nan_at(trainer.model, {3, 4, 5})
    last = run / "checkpoints" / "last.pt"
    with pytest.raises(Diverged, match=rf"steps 3-4 .* last good checkpoint: {last} \(step 2\)"):
        run_to_divergence(trainer)
    assert load_checkpoint(last)["progress"]["step"] == 2


def nan_gradient(model: torch.nn.Module, name: str) -> None:
    """Every backward gives parameter `name` a NaN gradient while the loss stays finite: what a
    wrong bf16 kernel did to I3D's weight gradients (docs/benchmarks.md)."""
    dict(model.named_parameters())[name].register_hook(lambda g: g * float("nan"))


BROKEN = "trunk.layer2.0.conv1.weight"


def test_a_run_none_of_whose_steps_applied_stops_naming_the_first_non_finite_parameter(
    tiny_demo: Path, tmp_path: Path
) -> None:
    # fp32: the line for a bf16 run adds its hint (the next test)
    cfg = config(tiny_demo, "optim.simulate_world_size=0", "train.max_bad_steps=2", "train.amp=off")
    run = tmp_path / "run"
    trainer = loop.Trainer(cfg, run, init_distributed("cpu"))
    nan_gradient(trainer.model, BROKEN)
    line = (
        r"^no step since this start applied an update: steps 1-3 not finite \(3 in a row > "
        rf"train.max_bad_steps=2; first the gradient of {BROKEN}\); last good checkpoint: "
    )
    with pytest.raises(Diverged, match=line) as raised:
        run_to_divergence(trainer)
    assert "\n" not in str(raised.value)
    assert [r["nonfinite"] for r in records(run, "bad_step")] == [f"the gradient of {BROKEN}"] * 3


def test_a_bf16_run_that_never_applied_names_its_arithmetic(
    tiny_demo: Path, tmp_path: Path
) -> None:
    cfg = config(tiny_demo, "optim.simulate_world_size=0", "train.max_bad_steps=0")
    cfg = apply_overrides(cfg, ["train.amp=bf16", "train.channels_last=off"])
    trainer = loop.Trainer(cfg, tmp_path / "run", init_distributed("cpu"))
    nan_gradient(trainer.model, BROKEN)
    with pytest.raises(Diverged, match="computed in bf16 autocast: --set train.amp=off trains"):
        run_to_divergence(trainer)


def test_a_run_that_trained_before_says_only_which_steps(tiny_demo: Path, tmp_path: Path) -> None:
    cfg = config(tiny_demo, "optim.simulate_world_size=0", "train.max_bad_steps=1")
    trainer = loop.Trainer(cfg, tmp_path / "run", init_distributed("cpu"))
    nan_at(trainer.model, {2, 3})
    with pytest.raises(Diverged, match=r"^steps 2-3 not finite .*; first the loss\); last") as e:
        run_to_divergence(trainer)
    assert "no step since" not in str(e.value)


def run_to_divergence(trainer: loop.Trainer) -> None:
    """`trainer.run()`, its loggers closed after as `train()` closes them (a TensorBoard writer
    left open flushes from its thread after the test's directory is gone)."""
    try:
        trainer.run()
    finally:
        trainer.run_log.close(completed=False)


def nan_gradient_on_rank_one(env: Any, root: str, run: str) -> str:
    """A 2-process AAVG run (no gradient synchronisation) whose rank 1 alone gets a NaN
    gradient in every step; every rank's `Diverged` line."""
    cfg = config(Path(root), "optim.simulate_world_size=0", "train.max_bad_steps=1")
    cfg = apply_overrides(cfg, ["dist.strategy=aavg", "aavg.k=2"])
    trainer = loop.Trainer(cfg, Path(run), env)
    if env.rank == 1:
        nan_gradient(trainer.model, BROKEN)
    try:
        trainer.run()
    except Diverged as err:
        return str(err)
    return "trained"


@pytest.mark.slow
def test_every_rank_names_the_parameter_another_rank_saw_first(
    tiny_demo: Path, tmp_path: Path
) -> None:
    from tests.distributed.multiproc import run_ranks

    lines = run_ranks(nan_gradient_on_rank_one, 2, str(tiny_demo), str(tmp_path / "run"))
    assert lines[0] == lines[1]
    assert lines[0].startswith("no step since this start applied an update: steps 1-2 not")
    assert f"first the gradient of {BROKEN} on rank 1)" in lines[0]
    assert [r["nonfinite"] for r in records(tmp_path / "run", "bad_step")] == [
        "something on another rank"
    ] * 2


def test_non_finite_weights_are_never_checkpointed(tiny_demo: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    trainer = loop.Trainer(config(tiny_demo), run, init_distributed("cpu"))
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("inf"))
    with pytest.raises(Diverged, match="weights not finite at step 0"):
        trainer.checkpointer.save(epoch_end=False)
    assert not (run / "checkpoints" / "last.pt").exists()


def two_process_run(env: Any, root: str, run: str) -> None:
    cfg = config(Path(root), "optim.simulate_world_size=0")  # 2 x 4 clips: global batch 8
    loop.Trainer(cfg, Path(run), env).run()


@pytest.mark.slow
def test_resume_on_one_process_keeps_the_global_batch_and_lr(
    tiny_demo: Path, tmp_path: Path
) -> None:
    from tests.distributed.multiproc import run_ranks

    two = tmp_path / "two"
    run_ranks(two_process_run, 2, str(tiny_demo), str(two))
    one = tmp_path / "one"
    shutil.copytree(two, one)
    for name in ("last.pt", "epoch_0002.pt"):  # back to the end of epoch 1 of 2
        (one / "checkpoints" / name).unlink()
    trainer = loop.Trainer(
        config(tiny_demo, "optim.simulate_world_size=0"), one, init_distributed("cpu")
    )
    assert (trainer.sizes.global_batch, trainer.sizes.accumulate) == (8, 2)
    trainer.run()
    ref, got = records(two, "train"), records(one, "train")
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    assert [r["lr"] for r in got] == [r["lr"] for r in ref]
    assert got[:2] == ref[:2]  # epoch 1 is the 2-process run's own
    # The same clips in each step; only BatchNorm's micro-batches differ (4 clips of one
    # process's share vs 4 consecutive clips), so the losses track without being equal. Over
    # four runs the two resumed steps differed by 0.53-0.56% and 0.11-0.17% of the loss
    # (docs/benchmarks.md, "Runs that survive"); 2% is 3.5x the largest gap seen, room for
    # the run-to-run spread of multi-threaded CPU arithmetic and no more.
    for a, b in zip(got[2:], ref[2:], strict=True):
        assert abs(a["loss"] - b["loss"]) < 0.02 * b["loss"], (a["loss"], b["loss"])
    with pytest.raises(ConfigError, match=r"train\.epochs 2 -> 3"):
        loop.Trainer(
            config(tiny_demo, "optim.simulate_world_size=0", "train.epochs=3"),
            one,
            init_distributed("cpu"),
        )


def powersgd_run(env: Any, root: str, run: str, cut_after: int) -> list[float]:
    """A 2-process PowerSGD run; with `cut_after` it dies after that many steps and restarts."""
    cfg = config(
        Path(root),
        "optim.simulate_world_size=0",
        "comm.hook=powersgd",
        "comm.powersgd_start_step=2",
        "train.checkpoint_every_steps=1",
    )
    if cut_after:
        with dies_after(cut_after), contextlib.suppress(KeyboardInterrupt):
            loop.Trainer(cfg, Path(run), env).run()
    summary = loop.Trainer(cfg, Path(run), env).run()
    return [*losses(Path(run)), summary["val_top1"]]


@pytest.mark.slow
def test_powersgd_resume_is_exact(tiny_demo: Path, tmp_path: Path) -> None:
    from tests.distributed.multiproc import run_ranks

    full = run_ranks(powersgd_run, 2, str(tiny_demo), str(tmp_path / "full"), 0)[0]
    cut = run_ranks(powersgd_run, 2, str(tiny_demo), str(tmp_path / "cut"), 2)[0]
    # PowerSGD compresses from step 3; a restart without its state would not, and step 4's
    # loss would differ.
    assert len(full) == 5 and cut == full
    assert (tmp_path / "cut" / "checkpoints" / "last.rank0001.comm.pt").is_file()


def nan_on_rank_one(env: Any, root: str, run: str) -> dict[str, Any]:
    """A 2-process run whose rank 1 alone produces NaN logits at step 2."""
    cfg = config(Path(root), "train.epochs=1", "optim.simulate_world_size=0")  # 2 steps
    trainer = loop.Trainer(cfg, Path(run), env)
    if env.rank == 1:
        nan_at(trainer.model, {2})
    before_step: list[list[torch.Tensor]] = []

    def snapshot(module: torch.nn.Module, args: Any) -> None:
        if module.training:
            before_step.append([p.detach().clone() for p in module.parameters()])

    trainer.model.register_forward_pre_hook(snapshot)
    summary = trainer.run()
    final = [p.detach().clone() for p in trainer.model.parameters()]
    return {"bad": summary["bad_steps"], "before": before_step, "final": final}


@pytest.mark.slow
def test_nan_on_one_rank_skips_the_step_on_every_rank(tiny_demo: Path, tmp_path: Path) -> None:
    from tests.distributed.multiproc import run_ranks

    ranks = run_ranks(nan_on_rank_one, 2, str(tiny_demo), str(tmp_path / "run"))
    for r in ranks:
        assert r["bad"] == [2]
        # No update at step 2 on either rank: the weights after it are those before it.
        assert all(torch.equal(a, b) for a, b in zip(r["before"][1], r["final"], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(ranks[0]["final"], ranks[1]["final"], strict=True))
    assert [r["step"] for r in records(tmp_path / "run", "bad_step")] == [2]
