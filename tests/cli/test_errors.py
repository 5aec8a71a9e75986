"""The command line fails early with messages naming the bad field, file and line: one line
`vidscale: error: ...` on stderr and exit status 2 for bad input of every command, run as users
run it (`python -m vidscale`, a process of its own); `--debug` shows the traceback instead."""

from __future__ import annotations

import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_predict import make_run, write_clip
from vidscale.cli import main


def test_bad_set_key_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "train",
            "--recipe",
            "demo_tsm_r18_8f_b32_e12",
            "--data",
            str(tmp_path),
            "--out",
            str(tmp_path / "r"),
            "--set",
            "optim.lrr=1",
        ]
    )
    assert code == 2
    assert "lrr" in capsys.readouterr().err


def test_bad_annotation_row_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "classes.txt").write_text("a\nb\n")
    (tmp_path / "train.csv").write_text("path,label\nx.mp4\n")
    (tmp_path / "val.csv").write_text("path,label\n")
    code = main(
        [
            "train",
            "--recipe",
            "demo_tsm_r18_8f_b32_e12",
            "--data",
            str(tmp_path),
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert code == 2
    assert "train.csv:2" in capsys.readouterr().err


def test_unknown_recipe(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["train", "--recipe", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown recipe" in capsys.readouterr().err


# -- every command, as a process ---------------------------------------------------------------


def vidscale(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vidscale", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


@dataclass(frozen=True)
class Bad:
    """A command line with bad input, and what its one-line error must name.

    `{run}` is a run with checkpoints, `{bare}` one without epoch checkpoints, `{text}` a text
    file, `{video}` a real video, `{empty}` an empty directory, `{tmp}` a scratch directory.
    """

    argv: tuple[str, ...]
    named: str

    def __str__(self) -> str:
        return " ".join(self.argv)


DEMO = "demo_tsm_r18_8f_b32_e12"
NCCL_ON_CPU = ("--set", "dist.backend=nccl", "--set", "train.device=cpu")
# One or more cases per command, each run as its own process.
BAD = [
    Bad(("eval", "{tmp}/no/such/run"), "has no config.json"),
    Bad(("eval", "{bare}"), "no epoch checkpoints"),
    Bad(("eval", "{run}", "--last", "0"), "--last"),
    Bad(("predict", "{run}", "{text}"), "notes.txt: not a readable video"),
    Bad(("predict", "{run}", "{tmp}/none.mp4"), "none.mp4"),
    Bad(("train", "--recipe", DEMO, "--data", "{tmp}/nowhere", "--out", "{tmp}/t1"), "data.root"),
    Bad(("train", "--recipe", DEMO, "--out", "{tmp}/t3", "--set", "optim.lrr=1"), "lrr"),
    Bad(("train", "--recipe", "nope", "--out", "{tmp}/t4"), "unknown recipe 'nope'"),
    Bad(("export", "{empty}", "--format", "torchscript", "--out", "{tmp}/m.pt"), "RUN"),
    Bad(("info", "tsm_resnet5"), "tsm_resnet5"),
    Bad(("recipes", "--world-size", "0"), "--world-size"),
    Bad(("prepare", "--root", "{tmp}/nowhere", "--out", "{tmp}/p1"), "nowhere"),
    Bad(("synth", "--out", "{text}/demo"), "notes.txt"),
    Bad(("study", "batch-size", "--out", "{tmp}/sw1", "--batches", "32,x"), "--batches"),
    Bad(("bench", "data", "--videos", "{tmp}/nowhere"), "--videos"),
    Bad(("bench", "data-wait", "--frames", "8,x"), "--frames"),
    Bad(("bench", "models", "nope"), "nope"),
]
# More of the same, through `main()` in this process (each process costs a second of imports).
MORE_BAD = [
    Bad(("eval", "{run}", "--set", "data.nope=1"), "data.nope"),
    Bad(("eval", "{run}", "--clips", "0"), "--clips"),
    Bad(("predict", "{tmp}/nowhere", "{video}"), "RUN"),
    Bad(("predict", "{run}", "{video}", "--checkpoint", "epoch_0099"), "epoch_0099"),
    Bad(("predict", "{run}/damaged.pt", "{video}"), "not a readable checkpoint"),
    Bad(("train", "--recipe", DEMO, "--data", "{empty}", "--out", "{tmp}/t2"), "classes.txt"),
    Bad(("export", "{run}", "--format", "torchscript", "--out", "{text}/m.pt"), "--out"),
    Bad(("info", "tsm_resnet18", "--size", "0"), "--size"),
    Bad(("recipes", "--dataset-size", "0"), "--dataset-size"),
    Bad(("prepare", "--layout", "kinetics", "--root", "{empty}", "--out", "{tmp}/p2"), "train.csv"),
    Bad(("prepare", "--root", "{empty}", "--out", "{tmp}/p3", "--split", "4"), "--split"),
    Bad(("synth", "--out", "{tmp}/s", "--size", "33"), "--size must be even"),
    Bad(("synth", "--out", "{tmp}/s", "--multi-label", "--images"), "--multi-label writes videos"),
    Bad(("study", "batch-size", "--out", "{tmp}/sw2", "--plot-only"), "no finished runs"),
    Bad(("study", "aavg", "--out", "{tmp}/a1", "--aavg-k", "1,x"), "--aavg-k"),
    Bad(("study", "multigrid", "--out", "{tmp}/m1", "--seeds", "0,x"), "--seeds"),
    Bad(("study", "multigrid", "--out", "{tmp}/m2", "--epochs", "0"), "--epochs"),
    Bad(("study", "two-stream", "--out", "{tmp}/ts"), "--data"),
    Bad(("bench", "data", "--rounds", "0"), "--rounds"),
    Bad(("bench", "data-wait", "--model", "nope"), "nope"),
    Bad(("bench", "models", "--quick", "--out-json", "{text}/b.json"), "--out-json"),
    Bad(("bench", "multigrid", "nope"), "unknown recipe 'nope'"),
    Bad(("bench", "multigrid", DEMO, "--variants", "long,fast"), "fast"),
    Bad(("bench", "multigrid", DEMO, "--set", "multigrid.epoch_factor=0"), "epoch_factor"),
    Bad(("bench", "multigrid", DEMO, "--fast-path", "fp16"), "--fast-path"),
    Bad(("bench", "scaling", "--fast-path", "bf16,tsm_resnet18=fp32"), "--fast-path"),
    Bad(("plan", "--world-size", "0"), "--world-size"),
    Bad(("train", "--recipe", DEMO, "--out", "{tmp}/t5", "--set", "dist.backend=mpi"), "backend"),
    Bad(
        (*("train", "--recipe", DEMO, "--data", "{empty}", "--out", "{tmp}/t6"), *NCCL_ON_CPU),
        "dist.backend=nccl needs CUDA devices",
    ),
    Bad((), "COMMAND"),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("bad_input")
    run = make_run(tmp / "ok")
    (run / "damaged.pt").write_bytes(b"\x00" * 64)
    bare = make_run(tmp / "bare")
    (bare / "checkpoints" / "epoch_0001.pt").unlink()
    (tmp / "empty").mkdir()
    text = tmp / "notes.txt"
    text.write_text("not a video\n")
    return {
        "tmp": tmp,
        "run": run,
        "bare": bare,
        "text": text,
        "video": write_clip(tmp / "clip.mp4"),
        "empty": tmp / "empty",
    }


@pytest.fixture(scope="module")
def outcomes(places: dict[str, Path]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every case of BAD, run at once: each process spends a second or two importing torch."""

    def one(case: Bad) -> subprocess.CompletedProcess[str]:
        argv = [arg.format(**places) for arg in case.argv]
        return vidscale(*argv, cwd=places["tmp"])

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(map(str, BAD), pool.map(one, BAD), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_input_is_one_line_and_status_2(
    case: Bad, outcomes: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    done = outcomes[str(case)]
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("vidscale: error: ")
    assert case.named in lines[0]
    assert done.returncode == 2


@pytest.mark.parametrize("case", MORE_BAD, ids=str)
def test_more_bad_input_is_one_line_and_status_2(
    case: Bad, places: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [arg.format(**places) for arg in case.argv]
    try:
        code = main(argv)
    except SystemExit as done:  # argparse's errors end the process
        code = int(done.code or 0)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("vidscale: error: ")
    assert case.named in lines[0]
    assert code == 2


@pytest.mark.slow
def test_debug_shows_the_traceback(places: dict[str, Path]) -> None:
    done = vidscale("--debug", "eval", str(places["tmp"] / "no" / "run"), cwd=places["tmp"])
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "ConfigError: RUN:" in done.stderr.splitlines()[-1]


@pytest.mark.slow
def test_ctrl_c_ends_quietly_with_status_130(tmp_path: Path) -> None:
    """SIGINT once the command is working (its first progress line), as Ctrl-C sends it."""
    argv = ["bench", "models", "tsn_resnet18", "--quick", "--repeats", "1000"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "vidscale", *argv, "--out-json", str(tmp_path / "b.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        # A shell that starts a job in the background ignores SIGINT for it, and Python then
        # keeps it ignored: give the command the terminal's default, as Ctrl-C meets it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith(("bench: probing", "bench: round")), first
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in rest and "error" not in rest, rest


def test_resume_modes() -> None:
    from vidscale.cli import build_parser

    def mode(*extra: str) -> str:
        args = build_parser().parse_args(["train", "--out", "RUN", "--recipe", "r", *extra])
        return str(args.resume)

    assert mode() == "auto" and mode("--resume") == "auto"  # safe in a first launch too
    assert mode("--resume", "never") == "never" and mode("--resume", "must") == "must"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["plan", "--gpus", "8"], "--gpus"),  # once `plan`'s flag; a prefix of --gpus-per-node
        (["bench", "models", "tsm_resnet18", "--thr", "1"], "--thr"),  # a prefix of --threads
    ],
)
def test_a_flag_must_be_spelled_in_full(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse would read a prefix of a longer flag as that flag: a flag that no longer
    exists was silently taken for another. Every command refuses it in one line."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("vidscale: error: unrecognized arguments: " + flag) and "\n" not in line
