"""`DRY_RUN=1 bash scripts/gpu_checks.sh`: the GPU acceptance run's every step on the CPU with
tiny shapes, so the script cannot rot between GPU runs.

It runs in a copy of the repository, as on a GPU host: setup makes the copy's .venv offline from
a Python that is itself a venv holding torch (this test's, as a CUDA image's python3 is), keeps
that torch and installs the project beside it; every later step runs in that .venv. The run
stands in for a bare CUDA image: the optional packages such an image may lack (scikit-learn,
ONNX, wandb) cannot be imported in any of its processes, so collecting the CUDA tests and every
step are shown not to need them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# Optional packages a CUDA image may lack, made unimportable in the dry run's processes.
ABSENT = ("sklearn", "onnx", "onnxruntime", "onnxscript", "wandb")
# None in sys.modules is how Python marks a module absent: `import` raises ModuleNotFoundError
# and `importlib.util.find_spec` answers None, as where the package is not installed.
ABSENT_SITECUSTOMIZE = f"import sys\n\nsys.modules.update(dict.fromkeys({ABSENT!r}))\n"


def copy_of_the_repository(dest: Path) -> Path:
    """The files a clone would have (tracked, and new ones not ignored): no .venv, no outputs."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes((ROOT / name).read_bytes())
    return dest


@pytest.mark.slow
def test_the_dry_run_takes_every_step_and_reports_every_figure(tmp_path: Path) -> None:
    repo, out = copy_of_the_repository(tmp_path / "repo"), tmp_path / "out"
    absent = tmp_path / "absent"
    absent.mkdir()
    (absent / "sitecustomize.py").write_text(ABSENT_SITECUSTOMIZE)
    env = {
        **os.environ, "DRY_RUN": "1", "OUT": str(out), "TMPDIR": str(tmp_path),
        "PYTHON": sys.executable, "PIP_CONFIG_FILE": os.devnull,  # offline, no local mirrors
        "PYTHONPATH": str(absent),
    }  # fmt: skip
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "gpu_checks.sh")],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "profile.log", "results.json", "setup.log", "shards.log", "summary.md", "tests.log",
        "throughput.log",
    ]  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert results["passed"] and results["dry_run"]
    assert [s["status"] for s in results["steps"].values()] == ["ok"] * 5
    # The copy's venv: the host's torch, the copy's vidscale (run outside both checkouts).
    where = subprocess.run(
        [str(repo / ".venv" / "bin" / "python"), "-c",
         "import torch, vidscale; print(torch.__file__); print(vidscale.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ""},
    ).stdout.split()  # fmt: skip
    assert where == [torch.__file__, str(repo / "vidscale" / "__init__.py")]
    # The stand-in really lacked them: the copy's Python cannot import one.
    stand_in = {**os.environ, "PYTHONPATH": str(absent)}
    for name in ABSENT:
        tried = subprocess.run(
            [str(repo / ".venv" / "bin" / "python"), "-c", f"import {name}"],
            capture_output=True, text=True, cwd=tmp_path, env=stand_in,
        )  # fmt: skip
        assert tried.returncode != 0 and "ModuleNotFoundError" in tried.stderr, name
    # Its torchrun starts workers in the copy's venv, not in the host's Python.
    (tmp_path / "prefix.py").write_text("import av, sys; print(sys.prefix)")
    launched = subprocess.run(
        [str(repo / ".venv" / "bin" / "torchrun"), "--standalone", "--nproc_per_node", "1",
         str(tmp_path / "prefix.py")],
        capture_output=True, text=True, check=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert launched.stdout.split() == [str(repo / ".venv")]
    assert "not installed" not in (out / "setup.log").read_text()
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
