"""`scripts/slurm/train.sbatch` is run by whatever bash a cluster has, and before 4.4 bash took
`"${name[@]}"` of an empty array for an unbound variable under `set -u` and aborted the job
(the script ran so without `--cpus-per-task`). This run by a bash 4.3 is recorded in
docs/benchmarks.md and repeatable with `VIDSCALE_OLD_BASH` (tests/cluster/test_slurm_nodes.py);
CI has only a newer bash, where the bare form passes, so the form itself is checked here.
"""

from __future__ import annotations

import re
from pathlib import Path

SBATCH = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "train.sbatch"


def expansions(text: str, name: str) -> tuple[int, int]:
    """How often the array `name` is expanded whole: guarded as ${name[@]+"${name[@]}"}, and
    bare (any other way)."""
    whole = len(re.findall(rf"\$\{{{name}\[@\]\}}", text))
    guarded = len(re.findall(rf'\$\{{{name}\[@\]\+"\$\{{{name}\[@\]\}}"\}}', text))
    return guarded, whole - guarded  # each guarded form holds one whole expansion


def test_an_array_that_may_be_empty_is_expanded_as_bash_before_4_4_accepts() -> None:
    lines = SBATCH.read_text().splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))  # code only
    maybe_empty = re.findall(r"^\s*(\w+)=\(\)", text, flags=re.MULTILINE)
    assert "cpus" in maybe_empty
    for name in maybe_empty:
        guarded, bare = expansions(text, name)
        assert guarded >= 1 and bare == 0, f"{name}: expand it as ${{{name}[@]+...}}"


def test_the_check_tells_the_bare_form_from_the_guarded_one() -> None:
    assert expansions('srun ${cpus[@]+"${cpus[@]}"} x', "cpus") == (1, 0)
    assert expansions('srun "${cpus[@]}" x', "cpus") == (0, 1)
