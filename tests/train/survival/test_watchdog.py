"""The hang watchdog: its bounds, and a real stalled process that reports itself and ends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vidscale.config import ConfigError, RunConfig, validate
from vidscale.train.survival.watchdog import FIRST_UNIT_FACTOR, HANG_EXIT_CODE, HangBounds, Watchdog


def test_the_first_unit_of_a_kind_gets_the_larger_bound_and_is_no_measure() -> None:
    bounds = HangBounds(floor_s=10.0, factor=4.0)
    assert bounds.bound("step") == 10.0 * FIRST_UNIT_FACTOR
    bounds.completed("step", None, 300.0)  # start-up: not a measure of a step
    assert bounds.slowest == {}
    assert bounds.bound("step") == 10.0


def test_the_bound_follows_the_slowest_completed_unit_of_its_kind() -> None:
    bounds = HangBounds(floor_s=10.0, factor=4.0)
    for seconds in (50.0, 1.0, 6.0, 2.0):  # the first is start-up
        bounds.completed("step", None, seconds)
    assert bounds.bound("step") == 24.0  # 4 x 6 s
    bounds.completed("checkpoint", None, 100.0)
    bounds.completed("checkpoint", None, 1.0)
    assert bounds.bound("checkpoint") == 10.0  # the floor
    assert bounds.bound("step") == 24.0  # kinds do not mix


def test_a_step_at_a_new_shape_gets_the_first_unit_bound() -> None:
    bounds = HangBounds(floor_s=1.0, factor=10.0)
    for seconds in (9.0, 0.5, 0.5):
        bounds.completed("step", (8, 224), seconds)
    assert bounds.bound("step", (8, 224)) == 5.0
    assert bounds.bound("step", (16, 160)) == 5.0 * FIRST_UNIT_FACTOR


@pytest.mark.parametrize("field", ["hang_floor_s", "hang_factor"])
def test_zero_disables_and_a_negative_setting_is_refused(field: str) -> None:
    cfg = RunConfig()
    setattr(cfg.train, field, 0.0)
    assert not HangBounds(cfg.train.hang_floor_s, cfg.train.hang_factor).enabled
    setattr(cfg.train, field, -1.0)
    with pytest.raises(ConfigError, match=f"train.{field} must be >= 0"):
        validate(cfg)


def test_each_arrival_is_one_unit_and_the_block_restores_the_outer_unit(tmp_path: Path) -> None:
    dog = Watchdog(HangBounds(60.0, 10.0), rank=0, hangs_dir=tmp_path)
    with dog.watching("step", "step 1 of epoch 1"):
        outer = dog.unit
        with dog.watching("eval", "evaluation at step 1") as watch:
            for _ in watch.each(range(4)):
                time.sleep(0.01)
            assert dog.unit is not None and dog.unit.kind == "eval"
        assert dog.unit is outer
    assert dog.unit is None
    # 5 units: block start to the first item, the three gaps, the last item to the block's end
    assert 0.005 < dog.bounds.slowest["eval"] < 1.0
    assert ("eval", None) in dog.bounds.seen


STALLED = """
import multiprocessing as mp, sys, time
from pathlib import Path
from vidscale.data.loaders import init_worker
from vidscale.train.survival.watchdog import HangBounds, Watchdog

def worker():
    init_worker(0)
    while True:
        time.sleep(0.05)

def read_a_file_that_never_answers():
    time.sleep(600)

if __name__ == "__main__":
    child = mp.get_context("fork").Process(target=worker, daemon=True)
    child.start()
    time.sleep(0.5)  # the worker has registered its stacks signal
    print(child.pid, flush=True)
    dog = Watchdog(HangBounds(0.5, 2.0), rank=3, hangs_dir=Path(sys.argv[1]),
                   workers=lambda: [child.pid])
    with dog.running():
        with dog.watching("step", "step 1 of epoch 1"):
            time.sleep(0.1)
        with dog.watching("step", "step 2 of epoch 1"):
            read_a_file_that_never_answers()
"""


@pytest.mark.slow
def test_a_stalled_step_writes_the_stacks_names_the_phase_and_ends_the_process(
    tmp_path: Path,
) -> None:
    script = tmp_path / "stalled.py"
    script.write_text(textwrap.dedent(STALLED))
    hangs = tmp_path / "hangs"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), str(hangs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode == HANG_EXIT_CODE, done.stderr[-3000:]
    assert took < 20
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("vidscale:")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("vidscale: rank 3 hung in step 2 of epoch 1: no progress for ")
    assert "(bound 0.5 s); stacks in " in lines[0]
    (record,) = [json.loads(x) for x in (hangs / "hangs.jsonl").read_text().splitlines()]
    assert record["rank"] == 3 and record["phase"] == "step 2 of epoch 1"
    assert 0.5 < record["waited_s"] < 5.0 and record["bound_s"] == 0.5
    stacks = (hangs / record["stacks"]).read_text()
    assert stacks.startswith("rank 3 (pid ")
    assert "read_a_file_that_never_answers" in stacks  # the main thread, where it stands
    worker = int(done.stdout.split()[0])
    # Its state as the kernel gave it: sleeping, or running on a loaded machine.
    assert re.search(rf"loader worker pid {worker}: state [RS] \((running|sleeping)\)", stacks)
    assert "in worker" in done.stderr  # the worker's own stack, on stderr
    # ... and the worker was ended with the process, not left behind
    deadline = time.monotonic() + 5
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{worker}").exists() or "Z" in _state(worker)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return "gone"


def test_a_disabled_watchdog_runs_no_thread(tmp_path: Path) -> None:
    dog = Watchdog(HangBounds(0.0, 10.0), rank=0, hangs_dir=tmp_path, poll_s=0.01)
    with dog.running(), dog.watching("step", "step 1 of epoch 1"):
        time.sleep(0.1)  # far past any bound a running watchdog would use
    assert not tmp_path.joinpath("hangs.jsonl").exists()
