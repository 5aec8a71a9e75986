"""`DRY_RUN=1 bash scripts/gpu_checks.sh`: the GPU acceptance run's every step on the CPU with
tiny shapes, so the script cannot rot between GPU runs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_dry_run_takes_every_step_and_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "DRY_RUN": "1", "OUT": str(out), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_checks.sh")],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "profile.log", "results.json", "shards.log", "summary.md", "tests.log", "throughput.log"
    ]  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert results["passed"] and results["dry_run"]
    assert [s["status"] for s in results["steps"].values()] == ["skipped"] + ["ok"] * 4
    tests = results["tests"]
    assert tests["total"] >= 4 and tests["skipped"] == tests["total"]
    assert all("CUDA" in s["reason"] for s in tests["skipped_tests"])
    models = [r["model"] for r in results["throughput"]["rows"]]
    assert models == [
        "tsm_resnet50", "tsn_resnet50", "i3d_resnet50_3x1x1", "i3d_resnet50_3x3x3",
        "slowfast_resnet50_8x8",
    ]  # fmt: skip
    assert all(t["value"] is not None for t in results["targets"])
    assert [m["model"] for m in results["profile"]["models"]] == [
        "tsm_resnet50", "slowfast_resnet50_8x8"
    ]  # fmt: skip
    assert results["shards"]["clips_per_s"] > 0
    assert "Result: **passed**" in (out / "summary.md").read_text()
    assert not list(tmp_path.glob("gpu_checks.*"))  # the work directory is removed
