"""Unreadable validation videos are left out of evaluation, counted and named.

A validation list of 10 real demo videos of which 2 cannot be read (a zero-byte file and a text
file named .mp4) must give 8 counted videos, both bad ones named, and the accuracy and loss of
the 8 readable videos alone: on 1 process and on 2 real gloo processes, for raw videos, for
prepared shards whose frames are corrupt, and through `vidscale eval` (`evaluate_run`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.distributed.multiproc import run_ranks
from tests.tiny_run import tiny_overrides
from vidscale.config import RunConfig, apply_overrides
from vidscale.data.dataset import VideoClipDataset
from vidscale.data.prepared.prepare import open_prepared, prepare_from_layout
from vidscale.data.prepared.shards import ShardEntry
from vidscale.distributed.env import DistEnv, init_distributed
from vidscale.models.registry import build_model
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import epoch_checkpoints, load_checkpoint, save_checkpoint
from vidscale.run.data import load_splits, resolve_data
from vidscale.scoring.evaluate import EvalResult, Stream, evaluate
from vidscale.train import builders, loop
from vidscale.train.evaluation.eval_run import evaluate_run, resolve_eval_config

WITH_BAD = "val_with_unreadable.csv"  # 10 videos: the 8 of val.csv with 2 bad ones at 2 and 3
READABLE = "val_readable_only.csv"  # the same 8 readable videos, in the same order
BAD_NAMES = ["unreadable_val/empty.mp4", "unreadable_val/text.mp4"]
CPU = torch.device("cpu")


def plant_unreadable_val(root: Path) -> None:
    """Write the two lists above next to `val.csv` (same relative paths and labels).

    On one process with batch 2 the bad videos fill a batch of their own; on 2 ranks
    (`ExactEvalSampler`: even and odd positions) each rank gets one, in a mixed batch.
    """
    (root / "unreadable_val").mkdir(exist_ok=True)
    (root / BAD_NAMES[0]).write_bytes(b"")
    (root / BAD_NAMES[1]).write_text("this is not a video\n")
    header, *rows = (root / "val.csv").read_text().splitlines()
    label = rows[0].rsplit(",", 1)[1]
    bad = [f"{name},{label}" for name in BAD_NAMES]
    (root / WITH_BAD).write_text("\n".join([header, *rows[:2], *bad, *rows[2:]]) + "\n")
    (root / READABLE).write_text("\n".join([header, *rows]) + "\n")


@pytest.fixture(scope="module")
def run_dir(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run trained for one epoch whose last checkpoint's classifier is redrawn.

    One epoch leaves the classifier near its initial 0.001 scale: every video then gets
    almost the same scores and the same class, and an accuracy over the wrong set of videos
    could go unnoticed. Unit-scale weights make the losses differ per video; centring each
    class's weights cancels most of what the (non-negative, similar) pooled features of all
    videos share, so the predicted classes differ too.
    """
    plant_unreadable_val(tiny_demo)
    cfg = apply_overrides(
        get_recipe("demo_tsm_r18_8f_b32_e12"), [*tiny_overrides(tiny_demo), "train.epochs=1"]
    )
    run = tmp_path_factory.mktemp("unreadable_run") / "run"
    loop.Trainer(cfg, run, init_distributed("cpu"), resume="never").run()
    path = epoch_checkpoints(run)[-1]
    state = load_checkpoint(path)
    weight = state["model"]["trunk.fc.weight"]
    g = torch.Generator().manual_seed(0)
    drawn = torch.randn(weight.shape, generator=g)
    state["model"]["trunk.fc.weight"] = drawn - drawn.mean(1, keepdim=True)
    save_checkpoint(state, path)
    return run


def eval_config(run: str, val_list: str, *, batch_size: int, workers: int) -> RunConfig:
    overrides = [
        f"data.val_list={val_list}",
        f"data.eval_batch_size={batch_size}",
        f"data.workers={workers}",
    ]
    return resolve_eval_config(Path(run), overrides=overrides)


def trained_model(cfg: RunConfig, run: str) -> nn.Module:
    model = build_model(cfg.model)
    model.load_state_dict(load_checkpoint(epoch_checkpoints(Path(run))[-1])["model"])
    return model


def evaluate_list(
    env: DistEnv, run: str, val_list: str, batch_size: int, workers: int = 0
) -> EvalResult:
    """Evaluate the run's last checkpoint on `val_list` through the training's eval loader.

    Module-level with plain arguments so that `run_ranks` can start it in fresh processes.
    """
    cfg = eval_config(run, val_list, batch_size=batch_size, workers=workers)
    splits = load_splits(cfg)
    cfg = resolve_data(cfg, splits.classes)
    return evaluate(
        Stream(trained_model(cfg, run), builders.model_input(cfg)),
        builders.build_eval_loader(cfg, env, splits.val),
        device=env.device,
        autocast=contextlib.nullcontext,
    )


def one_process() -> DistEnv:
    return DistEnv(0, 0, 1, 1, CPU, "gloo")


def one_video_at_a_time(run: Path, val_list: str) -> tuple[float, float, int]:
    """top-1 (%), mean loss and count of `val_list`, each video through the model alone,
    without `evaluate` or `collate`: an independent reference. A video of several test views
    (V, C, T, H, W) scores the mean of their logits, the evaluator's default."""
    cfg = eval_config(str(run), val_list, batch_size=1, workers=0)
    splits = load_splits(cfg)
    cfg = resolve_data(cfg, splits.classes)
    model = trained_model(cfg, str(run)).eval()
    prepare = builders.model_input(cfg).normalize
    dataset = VideoClipDataset(splits.val, cfg.data.eval_clip, train=False)
    hits, loss = 0, 0.0
    with torch.no_grad():
        for i in range(len(dataset)):
            item = dataset[i]
            assert item["readable"]
            clips = item["inputs"]["rgb"]
            views = clips if clips.ndim == 5 else clips[None]
            logits = model(prepare(views)).mean(dim=0, keepdim=True)
            label = torch.tensor([item["label"]])
            hits += int(logits.argmax(1) == label)
            loss += float(nn.functional.cross_entropy(logits, label))
    return 100.0 * hits / len(dataset), loss / len(dataset), len(dataset)


def assert_same_accuracy(got: EvalResult, want: EvalResult) -> None:
    assert (got.count, got.top1, got.top5) == (want.count, want.top1, want.top5)
    assert got.loss == pytest.approx(want.loss, rel=1e-6)


def assert_bad_named(result: EvalResult, root: Path) -> None:
    assert [Path(p) for p, _ in result.unreadable] == [root / name for name in BAD_NAMES]
    reasons = dict(result.unreadable)
    assert "zero-byte" in reasons[str(root / BAD_NAMES[0])]
    assert "DecodeError" in reasons[str(root / BAD_NAMES[1])]


@pytest.mark.parametrize(("batch_size", "workers"), [(2, 0), (3, 0), (4, 1)])
def test_one_process_counts_the_readable_videos_once(
    run_dir: Path, tiny_demo: Path, batch_size: int, workers: int
) -> None:
    got = evaluate_list(one_process(), str(run_dir), WITH_BAD, batch_size, workers)
    assert (got.count, got.videos) == (8, 10)
    assert_bad_named(got, tiny_demo)
    assert sorted(got.skipped) == got.unreadable  # one process: its share is all of them
    want = evaluate_list(one_process(), str(run_dir), READABLE, batch_size)
    assert (want.count, want.videos, want.unreadable) == (8, 8, [])
    assert_same_accuracy(got, want)
    top1, loss, count = one_video_at_a_time(run_dir, READABLE)
    assert (got.count, got.top1) == (count, pytest.approx(top1, abs=1e-9))
    assert got.loss == pytest.approx(loss, rel=1e-5)


def test_two_processes_count_the_readable_videos_once(run_dir: Path, tiny_demo: Path) -> None:
    want = evaluate_list(one_process(), str(run_dir), READABLE, 2)
    ranks = run_ranks(evaluate_list, 2, str(run_dir), WITH_BAD, 2)
    for rank, got in enumerate(ranks):
        assert (got.count, got.videos) == (8, 10)
        assert_bad_named(got, tiny_demo)  # gathered: each rank read only one of them
        assert [Path(p) for p, _ in got.skipped] == [tiny_demo / BAD_NAMES[rank]]
        assert_same_accuracy(got, want)


def test_corrupt_shard_records_are_left_out(run_dir: Path, tiny_demo: Path, tmp_path: Path) -> None:
    prepared = tmp_path / "prepared"
    prepare_from_layout(
        "generic", tiny_demo, prepared, workers=1, progress=False, short_side=0, quality=95
    )
    data = open_prepared(prepared)
    bad = [data.val[2], data.val[5]]
    for entry in bad:  # every JPEG frame of the two records zeroed
        with open(entry.shard, "r+b") as f:
            for offset, size in zip(entry.offsets, entry.sizes, strict=True):
                f.seek(int(offset))
                f.write(b"\0" * int(size))
    cfg = apply_overrides(
        eval_config(str(run_dir), "val.csv", batch_size=2, workers=0),
        [f"data.root={prepared}", "data.source=shards"],
    )
    cfg = resolve_data(cfg, data.classes)
    model = trained_model(cfg, str(run_dir))
    env = one_process()

    def run(entries: list[ShardEntry]) -> EvalResult:
        return evaluate(
            Stream(model, builders.model_input(cfg)),
            builders.build_eval_loader(cfg, env, entries),
            device=CPU,
            autocast=contextlib.nullcontext,
        )

    got = run(data.val)
    assert (got.count, got.videos) == (6, 8)
    assert [p for p, _ in got.unreadable] == sorted(e.path for e in bad)
    assert all("corrupt JPEG" in reason for _, reason in got.unreadable)
    assert_same_accuracy(got, run([e for e in data.val if e not in bad]))


def test_vidscale_eval_reports_videos_and_unreadable(run_dir: Path, tiny_demo: Path) -> None:
    got = evaluate_run(run_dir, overrides=[f"data.val_list={WITH_BAD}"])
    want = evaluate_run(run_dir, overrides=[f"data.val_list={READABLE}"])
    assert (got["videos"], got["listed"]) == (8, 10)
    assert [Path(u["path"]) for u in got["unreadable"]] == [tiny_demo / n for n in BAD_NAMES]
    assert all(u["reason"] for u in got["unreadable"])
    assert (want["videos"], want["listed"], want["unreadable"]) == (8, 8, [])
    (row,) = got["checkpoints"]
    (ref,) = want["checkpoints"]
    assert (row["count"], row["top1"], row["top5"]) == (ref["count"], ref["top1"], ref["top5"])
    assert row["loss"] == pytest.approx(ref["loss"], rel=1e-6)
