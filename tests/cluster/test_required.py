"""Where CI can install SLURM (root, apt-get), `.ci/run` sets VIDSCALE_REQUIRE_SLURM=1: then
tests/cluster fails when no cluster can start, instead of skipping unseen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cluster_tests(*, required: bool) -> subprocess.CompletedProcess[str]:
    """tests/cluster/test_slurm.py and test_slurm_nodes.py in a child pytest whose PATH holds no
    SLURM command."""
    env = {k: v for k, v in os.environ.items() if k != "VIDSCALE_REQUIRE_SLURM"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, without /usr/bin and /usr/sbin
    if required:
        env["VIDSCALE_REQUIRE_SLURM"] = "1"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/cluster/test_slurm.py",
            "tests/cluster/test_slurm_nodes.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_without_slurm_the_cluster_tests_skip_saying_why() -> None:
    done = run_cluster_tests(required=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped" in done.stdout and "SLURM is not installed" in done.stdout


@pytest.mark.slow
def test_where_slurm_is_required_its_absence_fails() -> None:
    done = run_cluster_tests(required=True)
    assert done.returncode != 0
    assert "VIDSCALE_REQUIRE_SLURM=1 but SLURM is not installed" in done.stdout + done.stderr
