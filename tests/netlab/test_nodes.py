"""A failed node's output in an error: what the rank itself printed last, not torchrun's report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vidscale.netlab.nodes import output_ending

# A rank that says one line and aborts, as glibc does on a corrupted heap.
ABORTING_RANK = """
import os, sys
print("rank output before the end", flush=True)
sys.stderr.write("double free or corruption (out)\\n")
sys.stderr.flush()
os.abort()
"""


def test_an_aborted_rank_s_last_words_and_exit_are_kept_and_the_launcher_s_report_cut(
    tmp_path: Path,
) -> None:
    script = tmp_path / "rank.py"
    script.write_text(ABORTING_RANK)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
         str(script)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "ChildFailedError" in output  # torchrun's own report, as a failed agent prints it
    assert "double free" not in "\n".join(output.splitlines()[-30:])  # pushed out of view

    ending = output_ending(output, lines=30)
    assert "double free or corruption (out)" in ending
    assert "rank output before the end" in ending
    assert "ChildFailedError" not in ending and "run.py" not in ending
    last = ending.splitlines()[-1]
    assert last.startswith("torchrun: the child failed: rank")
    assert "exitcode" in last and "SIGABRT" in last


def test_output_without_the_launcher_s_report_is_its_last_lines() -> None:
    text = "\n".join(f"line {i}" for i in range(100))
    assert output_ending(text, lines=3) == "line 97\nline 98\nline 99"
