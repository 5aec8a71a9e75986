"""The run's record in a checkpoint (`run.record`): one writer, one reader, every earlier
version's checkpoints read as they were written, and no other module reading its keys."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from vidscale.config import RunConfig, apply_overrides
from vidscale.fastpath.probe import FastPathDecision
from vidscale.recipes import get_recipe
from vidscale.run.checkpoint import UnreadableCheckpoint, save_checkpoint, upgrade
from vidscale.run.record import RECORD_KEYS, Origin, RunRecord, read_record
from vidscale.run.timeline import run_sizes
from vidscale.train.checkpoints.resume import resolve_start

PACKAGE = Path(__file__).resolve().parents[2] / "vidscale"
TRAIN_VIDEOS = 64
PROGRESS = {"epoch": 1, "step": 8, "step_in_epoch": 0}


def run_config() -> RunConfig:
    return apply_overrides(get_recipe("demo_tsm_r18_8f_b32_e12"), ["model.num_classes=5"])


def a_record(cfg: RunConfig) -> RunRecord:
    sizes = run_sizes(cfg, world_size=1, train_size=TRAIN_VIDEOS)
    decision = FastPathDecision.from_record(
        {
            "bf16": True,
            "channels_last": False,
            "source": "probe",
            "reason": "bf16 1.40x fp32",
            "shape": [2, 3, 8, 112, 112],
            "measured": {"bf16": {"median_s": 0.5}},
            "samples": {"bf16": [0.5, 0.52]},
            "rounds": 5,
        }
    )
    return RunRecord.of_run(cfg, sizes, fast_path=decision)


def weights() -> dict[str, torch.Tensor]:
    return {"fc.weight": torch.zeros(5, 4)}


def test_a_record_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    record = a_record(run_config())
    path = tmp_path / "last.pt"
    save_checkpoint({"model": weights(), "progress": PROGRESS, **record.state()}, path)
    assert read_record(path) == record
    # What the trainer has always written, under the same keys.
    assert set(record.state()) == {
        "plan",
        "config",
        "fingerprint",
        "fast_path",
        "model_name",
        "num_classes",
    }
    imported = RunRecord(imported_from={"format": "mmaction2", "file": "tsm.pth"})
    save_checkpoint({"model": weights(), **imported.state()}, path)
    assert read_record(path) == imported


def test_checkpoints_of_earlier_versions_read_as_they_were_written(tmp_path: Path) -> None:
    cfg = run_config()
    record = a_record(cfg)
    path = tmp_path / "epoch_0001.pt"
    # The first checkpoints: progress and counters at the top level, the model's name and
    # classes, no run sizes, config or fast-path decision.
    first = {"model": weights(), "optimizer": {}, **PROGRESS, "counters": {}}
    save_checkpoint({**first, "model_name": "tsm_resnet18", "num_classes": 5}, path)
    assert read_record(path) == RunRecord(model_name="tsm_resnet18", num_classes=5)
    start = resolve_start(
        cfg, upgrade(torch.load(path)), world_size=1, train_size=TRAIN_VIDEOS, source=str(path)
    )
    assert start.notes == [f"{path} records no plan: not checked, and this epoch's metrics restart"]
    assert start.progress.step == 8 and start.record == read_record(path)
    # Then sizes, config and fingerprint, still without a fast-path decision.
    before_decisions = replace(record, fast_path=None)
    state = {"model": weights(), "progress": PROGRESS, **before_decisions.state()}
    save_checkpoint(state, path)
    assert read_record(path) == before_decisions and read_record(path).origin == record.origin
    start = resolve_start(cfg, state, world_size=1, train_size=TRAIN_VIDEOS, source=str(path))
    assert start.exact and start.notes == [] and start.record == before_decisions


def malformed(tmp_path: Path, **changes: Any) -> str:
    """The error reading a checkpoint whose record has `changes` (None: the key removed)."""
    state = {"model": weights(), **a_record(run_config()).state()}
    for key, value in changes.items():
        if value is None:
            del state[key]
        else:
            state[key] = value
    path = tmp_path / "last.pt"
    save_checkpoint(state, path)
    with pytest.raises(UnreadableCheckpoint) as caught:
        read_record(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: not a readable checkpoint")
    return message


def test_a_malformed_record_is_one_line_naming_file_and_key(tmp_path: Path) -> None:
    assert "record key 'plan': global_batch is str, not a number" in malformed(
        tmp_path, plan={**a_record(run_config()).state()["plan"], "global_batch": "32"}
    )
    assert "record key 'plan': unknown sizes ['gpus']" in malformed(
        tmp_path, plan={**a_record(run_config()).state()["plan"], "gpus": 8}
    )
    assert "record key 'config' missing beside 'plan'" in malformed(tmp_path, config=None)
    assert "record key 'fingerprint': int, not str" in malformed(tmp_path, fingerprint=7)
    assert "record key 'num_classes': bool, not int" in malformed(tmp_path, num_classes=True)
    assert "record key 'fast_path': source 'guess'" in malformed(
        tmp_path, fast_path={"bf16": True, "channels_last": True, "source": "guess"}
    )
    assert "record key 'fast_path': bf16 and channels_last" in malformed(
        tmp_path, fast_path={"bf16": "yes", "channels_last": True, "source": "probe"}
    )
    assert "record key 'imported_from'" in malformed(tmp_path, imported_from={"file": 3})


def test_a_resume_names_the_key_of_a_malformed_record(tmp_path: Path) -> None:
    cfg = run_config()
    state = {"progress": PROGRESS, **a_record(cfg).state(), "model_name": ["tsm"]}
    with pytest.raises(UnreadableCheckpoint, match=r"last.pt: .*record key 'model_name'"):
        resolve_start(cfg, state, world_size=1, train_size=TRAIN_VIDEOS, source="run/last.pt")


def test_origin_of_a_run_fingerprints_its_flat_config() -> None:
    cfg = run_config()
    origin = Origin.of_run(cfg, run_sizes(cfg, world_size=1, train_size=TRAIN_VIDEOS))
    other = Origin.of_run(apply_overrides(cfg, ["optim.lr_per_8_clips=0.5"]), origin.sizes)
    assert origin.config["model.num_classes"] == 5 and len(origin.fingerprint) == 16
    assert other.fingerprint != origin.fingerprint


# -- the guard -----------------------------------------------------------------------------


# Reads of a record key's name that are not reads of a checkpoint: a bench's result row, the
# bench command's arguments, an export's sidecar. (module, the expression)
NOT_CHECKPOINTS = frozenset(
    {
        ("bench/scaling/worker.py", "result['fast_path']"),
        ("cli/bench_cmds.py", "given.pop('fast_path', None)"),
        ("export.py", "meta['config']"),
    }
)


def key_reads(source: str) -> list[str]:
    """Each expression in `source` that reads one of the record's keys by name: a subscript,
    or `.get` / `.pop` / `.setdefault` with the key as its first argument."""
    found = []
    for node in ast.walk(ast.parse(source)):
        key: ast.expr | None = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
            and node.args
        ):
            key = node.args[0]
        if isinstance(key, ast.Constant) and key.value in RECORD_KEYS:
            found.append(ast.unparse(node))
    return found


def test_only_the_record_reads_its_keys_from_a_checkpoint() -> None:
    """A checkpoint's record is read through `RunRecord.of` / `read_record` alone, which check
    each key's type and name the file: a read by key elsewhere would skip both."""
    reads = [
        (rel, expr)
        for path in sorted(PACKAGE.rglob("*.py"))
        if (rel := path.relative_to(PACKAGE).as_posix()) != "run/record.py"
        for expr in key_reads(path.read_text())
    ]
    outside = [f"{rel}: {expr}" for rel, expr in reads if (rel, expr) not in NOT_CHECKPOINTS]
    assert outside == [], f"a checkpoint's record read by key outside run/record.py: {outside}"
    # The guard sees what it guards against: the reads this module replaced.
    earlier = 'int(state["plan"]["train_size"]); checkpoint.get("fast_path"); s["config"]'
    assert sorted(key_reads(earlier)) == [
        "checkpoint.get('fast_path')",
        "s['config']",
        "state['plan']",
    ]
