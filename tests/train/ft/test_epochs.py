"""A fault-tolerant run on disk like any other (`vidscale.train.ft.epochs`), with real
processes: two torchrun groups over gloo, a real lighthouse, SIGKILL.

A two-group run of 2 epochs leaves `checkpoints/epoch_0001.pt` and `epoch_0002.pt`, two epoch
lines with validation in `metrics.jsonl`, a `summary.json` its reader reads, and `vidscale
eval`, `predict` and `export` work on it. Every group killed after epoch 1 and the same commands
started again continue from that checkpoint and end with exactly the uninterrupted run's
states. `--min-groups 2` makes every step a two-group step in both runs, so that their steps
are the same (with one group alone at some step, the global batch, and so the run, differ).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import torch

from tests.train.ft.ft_groups import RUN, start_group
from vidscale.cli import main
from vidscale.distributed.ft.launch import Lighthouse, finish, kill_group, records, wait_for
from vidscale.run.checkpoint import load_checkpoint
from vidscale.run.metrics import read_metrics
from vidscale.run.summary import RunSummary, summary_path

EPOCHS = 2
BOTH = ["--min-groups", "2"]


def run_groups(data: Path, out: Path, *, kill_after: Path | None = None) -> None:
    """The two groups of the tiny run in `out`, to the end, or SIGKILLed together as soon as
    `kill_after` exists."""
    lighthouse = Lighthouse.start(out.parent / f"{out.name}-lighthouse.log")
    start = partial(
        start_group,
        data=data,
        out=out,
        lighthouse=lighthouse.address,
        epochs=EPOCHS,
        timeout_s=20.0,
        extra=BOTH,
    )
    try:
        groups = [start(g, 2) for g in range(2)]
        if kill_after is not None:
            wait_for(kill_after.exists, 120, str(kill_after))
            for group in groups:
                kill_group(group)
            return
        assert [finish(p, 120, out, g) for g, p in enumerate(groups)] == [0, 0]
    finally:
        lighthouse.kill()


@pytest.fixture(scope="module")
def finished_run(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("ft_epochs") / "run"
    run_groups(tiny_demo, out)
    yield out


@pytest.mark.slow
def test_a_finished_run_has_checkpoints_metrics_and_summary(
    finished_run: Path, tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = finished_run
    ckpts = out / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("epoch_*.pt")) == ["epoch_0001.pt", "epoch_0002.pt"]
    assert (ckpts / "last.pt").samefile(ckpts / "epoch_0002.pt")
    last = load_checkpoint(ckpts / "last.pt")
    final = torch.load(out / "ft" / "final-group0.rank0.pt", weights_only=True)
    torch.testing.assert_close(last["model"], final["model"], rtol=0, atol=0)
    epochs = [m for m in read_metrics(out / "metrics.jsonl") if m["kind"] == "epoch"]
    assert [m["epoch"] for m in epochs] == [1, 2]
    assert all(0 <= m["val_top1"] <= 100 and m["val_count"] == 8 for m in epochs)
    summary = RunSummary.read(summary_path(out))
    assert summary.epochs == EPOCHS and summary.train_steps == last["progress"]["step"]
    assert summary.val_top1_history == tuple(m["val_top1"] for m in epochs)
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # The run's own epoch-end evaluation and `vidscale eval` score the same model alike.
    assert report["top1_mean"] == pytest.approx(epochs[-1]["val_top1"])
    video = next((tiny_demo / "videos" / "val").rglob("*.mp4"))
    assert main(["predict", str(out), str(video), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    exported = tmp_path / "model.pt"
    assert main(["export", str(out), "--format", "torchscript", "--out", str(exported)]) == 0
    assert torch.jit.load(str(exported)) is not None


@pytest.mark.slow
def test_every_group_killed_after_an_epoch_continues_from_its_checkpoint(
    finished_run: Path, tiny_demo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    epoch_1 = out / "checkpoints" / "epoch_0001.pt"
    run_groups(tiny_demo, out, kill_after=epoch_1)
    assert not (out / "checkpoints" / "epoch_0002.pt").exists(), "killed too late to test"
    saved_step = load_checkpoint(epoch_1)["progress"]["step"]
    before = [len(records(out, g)) for g in range(2)]
    run_groups(tiny_demo, out)
    for g in range(2):
        again = records(out, g)[before[g] :]
        # Continued from the checkpoint's step, with no peer to heal from.
        assert again[0]["step"] == saved_step + 1 and not again[0]["healed"]
        state = torch.load(out / "ft" / f"final-group{g}.rank0.pt", weights_only=True)
        reference = torch.load(finished_run / "ft" / f"final-group{g}.rank0.pt", weights_only=True)
        torch.testing.assert_close(state, reference, rtol=0, atol=0)


def test_a_checkpoint_every_n_steps_is_refused_in_one_line(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["train-ft", *RUN, "--data", str(tiny_demo), "--out", str(tmp_path)]
    args += ["--lighthouse", "127.0.0.1:1", "--group", "0", "--groups", "2"]
    code = main([*args, "--set", "train.checkpoint_every_steps=5"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("vidscale: error: train.checkpoint_every_steps: train-ft checkpoints")


def test_a_restart_with_other_run_settings_is_refused_naming_them() -> None:
    """The check a whole-job restart makes of the newest checkpoint's record: another LR or
    seed would not continue the run (refused, the fields named); other paths or logging
    would (accepted)."""
    from dataclasses import replace

    from vidscale.config import ConfigError, apply_overrides
    from vidscale.fastpath.decision import FastPathDecision
    from vidscale.recipes import get_recipe
    from vidscale.run.record import Origin, RunRecord
    from vidscale.run.timeline import run_sizes
    from vidscale.train.ft.epochs import check_same_run

    cfg = apply_overrides(get_recipe(RUN[1]), ["model.num_classes=8", "data.root=/a"])
    record = RunRecord(
        origin=Origin.of_run(cfg, run_sizes(cfg, world_size=2, train_size=1536)),
        fast_path=FastPathDecision(False, False, "explicit", reason="plain"),
        model_name=cfg.model.name,
        num_classes=8,
    )
    state = record.state()
    check_same_run(cfg, state, Path("epoch_0001.pt"))
    moved = apply_overrides(cfg, ["data.root=/b", "train.progress=false", "train.threads=1"])
    check_same_run(moved, state, Path("epoch_0001.pt"))
    other = replace(cfg, optim=replace(cfg.optim, lr_per_8_clips=0.1))
    other = apply_overrides(other, ["train.seed=3"])
    with pytest.raises(ConfigError) as refused:
        check_same_run(other, state, Path("epoch_0001.pt"))
    message = str(refused.value)
    assert message.startswith("epoch_0001.pt was written by this run with other settings: ")
    assert "optim.lr_per_8_clips 0.0125 -> 0.1" in message and "train.seed 0 -> 3" in message
