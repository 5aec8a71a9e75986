"""`RunLog`: the records it writes to metrics.jsonl, the totals and counters it keeps, the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vidscale.distributed.env import init_distributed
from vidscale.distributed.traffic import Traffic
from vidscale.run.metrics import read_metrics
from vidscale.scoring.evaluate import EvalResult
from vidscale.step.agreement import StepAgreement
from vidscale.step.run import StepResult
from vidscale.train.records.run_log import RunLog


def step_result(
    loss: float, *, finite: bool = True, hits: int = 3, nonfinite: str = ""
) -> StepResult:
    agreed = StepAgreement(loss=loss, hits=hits, clips=8, finite=finite, stop=False)
    return StepResult(
        loss=loss,
        hits=hits,
        count=8,
        wait_s=0.25,
        grad_norm=2.0,
        agreed=agreed,
        lr=0.1,
        seconds=1.0,
        clips=8,
        skipped=[("bad.mp4", "no video stream")],
        nonfinite=nonfinite,
    )


def run_steps(log: RunLog, results: list[StepResult], *, traffic: Traffic) -> None:
    """What the trainer calls after each step, in its order."""
    for step, result in enumerate(results, start=1):
        if not result.agreed.finite:
            log.skipped_step(result, step=step, epoch=0)
        log.step_done(result)
        log.traffic(traffic, step=step, epoch=0, own_record=False)
        log.train_record(result, step=step, epoch=0)


def test_train_records_every_log_every_finite_steps_with_the_traffic_since_the_last(
    tmp_path: Path,
) -> None:
    log = RunLog(init_distributed("cpu"), log_every=2, show_progress=False)
    log.open(tmp_path, resumed_at=None)
    results = [step_result(1.0), step_result(2.0), step_result(3.0), step_result(4.0)]
    run_steps(log, results, traffic=Traffic(bytes_sent=100, seconds=0.5, rounds=1))
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["kind"], r["step"], r["loss"]) for r in records] == [
        ("train", 2, 2.0),
        ("train", 4, 4.0),
    ]
    assert [r["comm_bytes"] for r in records] == [200, 200]  # two steps' traffic each
    assert records[0]["clips_per_second"] == 8.0 and records[0]["grad_norm"] == 2.0
    assert log.totals.stats()["train_loss"] == pytest.approx(2.5)
    assert log.counters.steps == 4 and log.counters.comm_bytes == 400
    log.close(completed=False)  # the TensorBoard writer's thread ends here, not after the test


def test_a_skipped_step_is_recorded_and_left_out_of_the_epoch_loss(tmp_path: Path) -> None:
    log = RunLog(init_distributed("cpu"), log_every=1, show_progress=False)
    log.open(tmp_path, resumed_at=None)
    bad = step_result(float("nan"), finite=False)
    run_steps(log, [step_result(1.0), bad, step_result(3.0)], traffic=Traffic())
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["kind"], r["step"]) for r in records] == [
        ("train", 1),
        ("bad_step", 2),
        ("train", 3),
    ]
    assert log.counters.bad_steps == [2]
    stats = log.totals.stats()
    assert stats["train_loss"] == pytest.approx(2.0)  # (1 + 3) / 2 finite steps
    assert stats["train_top1"] == pytest.approx(100 * 6 / 16)
    assert stats["skipped_steps"] == 1
    log.close(completed=False)


def test_skipped_steps_show_in_the_step_line_the_progress_bar_the_epoch_and_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = RunLog(init_distributed("cpu"), log_every=1, show_progress=False)
    log.open(tmp_path, resumed_at=None)
    good = step_result(1.0)
    assert "skipped" not in log.progress_fields(good)
    bad = step_result(float("nan"), finite=False, nonfinite="the gradient of conv.weight")
    run_steps(log, [good, bad, bad], traffic=Traffic())
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "vidscale: step 2: the gradient of conv.weight not finite; skipped (1 skipped so far)",
        "vidscale: step 3: the gradient of conv.weight not finite; skipped (2 skipped so far)",
    ]
    assert log.progress_fields(good)["skipped"] == "2"
    log.epoch_done(None, step=3, epochs_done=1, epochs=2, lr=0.1)
    epoch_line = capsys.readouterr().out
    assert "train loss 1.0000 top1 37.5 | 2 steps skipped (not finite) | " in epoch_line
    summary = log.finish(model="m", world_size=1, global_batch=8, epochs=1, num_classes=2, extra={})
    assert (summary["skipped_steps"], summary["applied_steps"]) == (2, 1)
    assert summary["bad_steps"] == [2, 3]


def test_the_epoch_record_starts_the_next_epochs_totals_afresh(tmp_path: Path) -> None:
    log = RunLog(init_distributed("cpu"), log_every=10, show_progress=False)
    log.open(tmp_path, resumed_at=None)
    run_steps(log, [step_result(1.0), step_result(2.0)], traffic=Traffic())
    val = EvalResult(50.0, 90.0, 1.25, 8, [], [("gone.mp4", "missing")], 9)
    log.evaluated(val)
    log.epoch_done(val, step=2, epochs_done=1, epochs=3, lr=0.05)
    (epoch,) = read_metrics(tmp_path / "metrics.jsonl")
    assert epoch["kind"] == "epoch" and epoch["epoch"] == 1 and epoch["lr"] == 0.05
    assert epoch["train_loss"] == pytest.approx(1.5)
    assert epoch["data_wait_fraction"] == pytest.approx(0.25)
    assert (epoch["val_top1"], epoch["val_count"], epoch["val_unreadable"]) == (50.0, 8, 1)
    assert log.totals.steps == 0  # the next epoch starts afresh
    assert log.counters.val_history == [50.0] and log.counters.val_videos == 8
    log.close(completed=False)  # the TensorBoard writer's thread ends here, not after the test


def test_finish_writes_the_summary_from_the_counters(tmp_path: Path) -> None:
    log = RunLog(init_distributed("cpu"), log_every=1, show_progress=False)
    log.open(tmp_path, resumed_at=None)
    run_steps(log, [step_result(1.0), step_result(2.0)], traffic=Traffic(bytes_sent=10))
    summary = log.finish(
        model="m", world_size=1, global_batch=8, epochs=1, num_classes=4, extra={"recipe": "r"}
    )
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == summary
    assert (summary["train_steps"], summary["comm_bytes"], summary["recipe"]) == (2, 20, "r")
    assert summary["clips_per_second"] == pytest.approx(8.0)  # 16 clips in 2 s
    assert summary["skipped"] == [{"path": "bad.mp4", "reason": "no video stream"}]


def test_a_restored_log_continues_its_counters_and_totals() -> None:
    env = init_distributed("cpu")
    first = RunLog(env, log_every=1, show_progress=False)
    run_steps(first, [step_result(1.0)], traffic=Traffic())
    counters, totals = first.counters_state(), first.totals_state()
    assert (counters, totals) == ([first.counters.as_dict()], first.totals.as_dict())
    restored = RunLog(env, log_every=1, show_progress=False)
    restored.load_counters(counters)
    restored.load_totals(totals)
    assert restored.counters == first.counters and restored.totals == first.totals
