"""scripts/host_requirements.py: what scripts/setup.sh installs beside a host's own torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "host_requirements.py"
PYPROJECT = """
[build-system]
requires = ["setuptools>=1", "not-a-backend>=1"]
[project]
name = "x"
dependencies = ["torch>=99", "numpy>=1", "numpy_but_missing>=1", "pytest<1"]
[project.optional-dependencies]
dev = ["Not.A_Package==1", "tqdm; python_version < '3'"]
"""


def lines(*args: str | Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_only_the_unsatisfied_are_printed_and_never_torch(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT)
    # numpy is installed inside its range; pytest is installed outside it; torch is never named
    # whatever its range; a marker that does not apply drops tqdm.
    assert lines(pyproject) == ["numpy_but_missing>=1", "pytest<1"]
    assert lines(pyproject, "--extra", "dev") == [
        "numpy_but_missing>=1", "pytest<1", "Not.A_Package==1"
    ]  # fmt: skip
    assert lines(pyproject, "--extra", "dev", "--all", "--only", "not-a-package", "NumPy") == [
        "numpy>=1", "Not.A_Package==1"
    ]  # fmt: skip


def test_build_reads_the_build_system_s_requirements(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT)
    assert lines(pyproject, "--build") == ["not-a-backend>=1"]
    assert lines(pyproject, "--build", "--all") == ["setuptools>=1", "not-a-backend>=1"]


def test_the_project_s_own_requirements_are_all_met_in_the_test_install() -> None:
    assert lines(ROOT / "pyproject.toml", "--extra", "dev") == []
    assert lines(ROOT / "pyproject.toml", "--build") == []
    assert lines(ROOT / "pyproject.toml", "--all", "--only", "av") == ["av<19,>=14"]


def test_an_undeclared_name_is_one_line_naming_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(ROOT / "pyproject.toml"), "--all", "--only", "avv"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith("not a declared requirement: avv")
    both = [sys.executable, str(SCRIPT), "--build", "--extra", "dev"]
    done = subprocess.run(both, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "--extra does not apply" in done.stderr.splitlines()[-1]
