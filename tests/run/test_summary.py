"""`RunSummary`: summary.json's one writer and reader. A run's file reads back and writes again
byte for byte, in the order the trainer has always written it; a summary of an earlier version
reads; a malformed one is one line naming the file and the key; no other module opens it."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.config import apply_overrides
from vidscale.distributed.env import init_distributed
from vidscale.recipes import get_recipe
from vidscale.run import summary as run_summary
from vidscale.run.summary import (
    SUMMARY_FILE,
    PathReason,
    RunSummary,
    UnreadableSummary,
    summary_path,
)
from vidscale.scoring.evaluate import EvalResult
from vidscale.train import loop
from vidscale.train.records.run_log import RunLog

RECIPE = "demo_tsm_r18_8f_b32_e12"
VIDSCALE = Path(__file__).resolve().parents[2] / "vidscale"

# The keys of a single-label run's summary.json in the order the trainer wrote them before
# the typed writer (the counters, then the trainer's fields, then the machine's).
TRAINER_KEYS = [
    "model",
    "world_size",
    "global_batch",
    "epochs",
    "num_classes",
    "chance_top1",
    "val_top1",
    "best_val_top1",
    "val_top1_history",
    "wall_seconds",
    "train_steps",
    "clips_per_second",
    "data_wait_fraction",
    "comm_bytes",
    "comm_seconds",
    "comm_rounds",
    "comm_bytes_per_step",
    "skipped",
    "bad_steps",
    "skipped_steps",
    "applied_steps",
    "val_videos",
    "val_unreadable",
    "recipe",
    "base_lr",
    "strategy",
    "batch_history",
    "host_memory_retained",
    "eval_precision",
    "fast_path",
    "fast_path_choice",
    "cpus",
    "threads",
]
# What the first version wrote (764c1eb).
FIRST_KEYS = [*TRAINER_KEYS[:13], "skipped"]


@pytest.fixture(scope="module")
def tiny_run(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    run = tmp_path_factory.mktemp("summary") / "run"
    cfg = apply_overrides(get_recipe(RECIPE), [*tiny_overrides(tiny_demo), "train.epochs=1"])
    returned = loop.train(cfg, run_dir=run, resume="never")
    return run, returned


def test_a_runs_summary_reads_back_and_writes_again_byte_for_byte(
    tiny_run: tuple[Path, dict], tmp_path: Path
) -> None:
    run, returned = tiny_run
    written = summary_path(run).read_text()
    assert list(json.loads(written)) == TRAINER_KEYS
    assert json.loads(written) == returned  # what train() returns is what the file holds
    summary = RunSummary.read(summary_path(run))
    again = tmp_path / SUMMARY_FILE
    summary.write(again)
    assert again.read_bytes() == summary_path(run).read_bytes()
    # Every key the trainer writes is typed: nothing is left to `extra`.
    assert summary.extra == {}
    assert (summary.model, summary.recipe, summary.epochs) == ("tsm_resnet18", RECIPE, 1)
    assert isinstance(summary.val_top1, float) and summary.val_top1_history == (summary.val_top1,)
    assert summary.applied_steps == summary.train_steps > 0 and summary.bad_steps == ()
    assert summary.eval_precision == "fp32" and summary.fast_path_choice is not None
    assert summary.batch_history == ((0, summary.global_batch),)


def multi_label_summary(run_dir: Path) -> Path:
    """A multi-label run's summary as the run log writes it: mAP keys, an unreadable video."""
    log = RunLog(init_distributed("cpu"), log_every=10, show_progress=False)
    log.open(run_dir, resumed_at=None)
    val = EvalResult(
        40.0, 80.0, 0.5, 5, [], [("gone.mp4", "missing")], 6, map=0.75, map_chance=0.25
    )
    log.evaluated(val)
    log.epoch_done(val, step=0, epochs_done=1, epochs=1, lr=0.1)
    extra = {"recipe": "r", "note": [1, 2]}  # a key the summary does not know is kept
    log.finish(model="m", world_size=1, global_batch=8, epochs=1, num_classes=6, extra=extra)
    return summary_path(run_dir)


def test_a_multi_label_summary_round_trips_with_its_map_and_unknown_keys(tmp_path: Path) -> None:
    path = multi_label_summary(tmp_path)
    summary = RunSummary.read(path)
    assert (summary.val_map, summary.best_val_map, summary.chance_map) == (0.75, 0.75, 0.25)
    assert summary.val_map_history == (0.75,)
    assert summary.val_unreadable == (PathReason("gone.mp4", "missing"),)
    assert summary.extra == {"note": [1, 2]}
    keys = list(json.loads(path.read_text()))
    assert keys[keys.index("val_unreadable") + 1 :] == [
        "val_map",
        "best_val_map",
        "val_map_history",
        "chance_map",
        "recipe",
        "note",
    ]
    again = tmp_path / "again.json"
    summary.write(again)
    assert again.read_bytes() == path.read_bytes()


def test_a_summary_of_the_first_version_reads_with_the_later_keys_none(
    tiny_run: tuple[Path, dict], tmp_path: Path
) -> None:
    current = json.loads(summary_path(tiny_run[0]).read_text())
    old = {key: current[key] for key in FIRST_KEYS}
    old["allreduce_bytes_per_step"] = 0.0  # c59a180 to 9f7ef07, before comm_bytes_per_step
    path = tmp_path / SUMMARY_FILE
    path.write_text(json.dumps(old, indent=2) + "\n")
    summary = RunSummary.read(path)
    assert summary.val_top1 == current["val_top1"] and summary.train_steps > 0
    later = [f.name for f in dataclasses.fields(RunSummary) if f.name not in FIRST_KEYS]
    assert [getattr(summary, name) for name in later[:-1]] == [None] * (len(later) - 1)
    assert summary.extra == {"allreduce_bytes_per_step": 0.0}
    assert summary.record() == {**{k: old[k] for k in FIRST_KEYS}, **summary.extra}


def test_an_evaluation_never_run_is_null_not_absent(tmp_path: Path) -> None:
    log = RunLog(init_distributed("cpu"), log_every=10, show_progress=False)
    log.open(tmp_path, resumed_at=None)
    log.finish(model="m", world_size=1, global_batch=8, epochs=1, num_classes=4, extra={})
    written = json.loads(summary_path(tmp_path).read_text())
    assert (written["val_top1"], written["val_videos"], written["val_unreadable"]) == (
        None,
        None,
        [],
    )
    summary = RunSummary.read(summary_path(tmp_path))
    assert summary.val_top1 is None and summary.val_videos is None
    assert summary.record() == written


def unreadable(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run" / SUMMARY_FILE
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    with pytest.raises(UnreadableSummary) as err:
        RunSummary.read(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def changed(tmp_path: Path, **values: Any) -> str:
    record = json.loads(multi_label_summary(tmp_path).read_text())
    return unreadable(tmp_path, json.dumps({**record, **values}))


def test_a_malformed_summary_is_one_line_naming_file_and_key(tmp_path: Path) -> None:
    assert "not JSON" in unreadable(tmp_path, '{"model": "m",')
    assert "a JSON list, not an object" in unreadable(tmp_path, "[1, 2]")
    assert "key 'epochs': str, not int" in changed(tmp_path, epochs="1")
    assert "key 'world_size': bool, not int" in changed(tmp_path, world_size=True)
    assert "key 'wall_seconds': null, not a number" in changed(tmp_path, wall_seconds=None)
    assert "key 'val_top1_history': dict, not a list" in changed(tmp_path, val_top1_history={})
    assert "key 'skipped': an entry" in changed(tmp_path, skipped=[{"path": "a.mp4"}])
    assert "key 'batch_history': an entry" in changed(tmp_path, batch_history=[[0, 8, 1]])
    assert "key 'host_memory_retained': int, not bool" in changed(tmp_path, host_memory_retained=1)
    record = json.loads(multi_label_summary(tmp_path).read_text())
    del record["train_steps"]
    assert "key 'train_steps': missing" in unreadable(tmp_path, json.dumps(record))


def test_a_bad_value_from_the_counters_is_a_bug_not_bad_input() -> None:
    with pytest.raises(TypeError, match="run summary key 'model'"):
        RunSummary.of_record({"model": 3})


def test_every_field_has_its_reader() -> None:
    fields = {f.name for f in dataclasses.fields(RunSummary)} - {"extra"}
    assert set(run_summary._CONVERTERS) == fields


def file_names(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants naming summary.json (the name or a path or pattern ending in it),
    docstrings aside."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and (node.value == SUMMARY_FILE or node.value.endswith("/" + SUMMARY_FILE))
    ]


def test_no_other_module_opens_summary_json() -> None:
    """Other modules find the file through `summary_path` (or the glob of `SUMMARY_FILE`) and
    read it through `RunSummary.read`; none spells the name to open it itself."""
    found = {}
    for path in sorted(VIDSCALE.rglob("*.py")):
        if path.name == "summary.py" and path.parent.name == "run":
            continue
        names = file_names(ast.parse(path.read_text(), filename=str(path)))
        if names:
            found[str(path.relative_to(VIDSCALE))] = names
    assert found == {}


def test_the_guard_finds_a_module_that_opens_the_file() -> None:
    source = 'import json\ns = json.loads((run / "summary.json").read_text())\n'
    assert file_names(ast.parse(source)) == [(2, "summary.json")]
    glob = 'dirs = out.glob("*_b*/summary.json")\n'
    assert file_names(ast.parse(glob)) == [(1, "*_b*/summary.json")]
    documented = '"""Reads `summary.json`."""\nprint(f"({n} entries; see summary.json)")\n'
    assert file_names(ast.parse(documented)) == []
