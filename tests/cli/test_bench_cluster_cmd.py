"""`vidscale bench cluster` (`cli.bench_cluster_cmd`): its flags build `ClusterConfig`, bad
input and a missing root each end the real command in one line, and `--combine` joins two
recorded results without root. The sweep itself, as root, is tests/bench/cluster/test_four_nodes.py."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vidscale.bench.cluster.config import ClusterConfig
from vidscale.cli import build_parser, main
from vidscale.cli.flags import config_from_args, plot_path
from vidscale.netlab.link import PREFIX, namespaces

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "results" / "cluster_scaling.json"
NETWORK = ROOT / "docs" / "results" / "network_scaling.json"


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", "cluster", *argv])


def cli(*argv: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The real command in a process of its own, from the repository (the recorded results
    name their one-node inputs relative to it)."""
    cmd = [*prefix, sys.executable, "-m", "vidscale", "bench", "cluster", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_no_flags_is_the_configs_defaults_and_each_flag_sets_its_field() -> None:
    assert config_from_args(ClusterConfig, parse()) == ClusterConfig()
    args = parse(
        "--nodes", "2,4", "--rates", "1gbit", "--models", "tsm_resnet50", "--hooks", "bf16",
        "--aavg-k", "2", "--epoch-k", "0", "--steps", "3", "--warmup", "1",
        "--bucket-cap-mb", "5", "--straggler-nodes", "4", "--straggler-rate", "50mbit",
        "--straggler-factor", "2", "--cores", "1", "--baseline", str(NETWORK),
        "--standin-compute", "co_running",
    )  # fmt: skip
    assert config_from_args(ClusterConfig, args) == ClusterConfig(
        nodes=(2, 4),
        rates=("1gbit",),
        models=("tsm_resnet50",),
        hooks=("bf16",),
        aavg_k=2,
        epoch_k=0,
        steps=3,
        warmup=1,
        bucket_cap_mb=5.0,
        straggler_nodes=4,
        straggler_rate="50mbit",
        straggler_factor=2.0,
        cores=1,
        baseline=NETWORK,
        standin_compute="co_running",
    )
    assert (args.out_json, plot_path(args)) == (
        Path("bench_cluster.json"),
        Path("bench_cluster.png"),
    )
    elsewhere = parse("--out-json", "results/n4.json")
    assert plot_path(elsewhere) == Path("results/n4.png")  # a result and its plot together
    assert plot_path(parse("--out-json", "results/n4.json", "--plot", "p.png")) == Path("p.png")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--nodes", "2,17"], "--nodes: 17 is not 2 to 16"),
        (["--nodes", "1"], "--nodes: must be >= 2, got 1"),
        (["--straggler-nodes", "1"], "--straggler-nodes: 1 is not 2 to 16"),
        (["--rates", "fast"], "--rates: link rate 'fast'"),
        (["--epoch-k", "6"], "--epoch-k: a multiple of --aavg-k (4), got 6"),
        (["--steps", "6"], "--steps: a multiple of --aavg-k (4), so that every averaging"),
        (["--trunk-nodes", "17"], "--trunk-nodes: 17 is not 2 to 16"),
        (["--trunk-nodes", "4", "--trunk-rates", "slow"], "--trunk-rates: link rate 'slow'"),
        (["--bucket-cap-mb", "0"], "--bucket-cap-mb: must be > 0, got 0.0"),
        (["--baseline", "no_such.json"], "--baseline: no_such.json is not a file"),
        (["--models", "tsm_resnet18"], "--models: tsm_resnet18 is not in"),
        (
            ["--standin-compute", "co_running", "--baseline", str(NETWORK)],
            f"--standin-compute: {NETWORK} has no co_running step of tsm_resnet50",
        ),
        (["--combine", "no_such.json"], "--combine: no_such.json is not a file"),
        (["--check-against", str(NETWORK), "--json"], "--check-against: its table is for a person"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the default --baseline is relative to the repository
    assert main(["bench", "cluster", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vidscale: error: {line}") and err.count("\n") == 1, err


def test_the_real_command_refuses_a_bad_flag_in_one_line_without_a_traceback() -> None:
    done = cli("--hooks", "fp16")
    assert done.returncode == 2
    assert done.stderr.startswith("vidscale: error: argument --hooks: unknown 'fp16'"), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_without_root_the_sweep_ends_in_one_line(tmp_path: Path) -> None:
    """As root, the command runs in a user namespace of its own, where it is not root (uid
    65534) but still reads the repository and the interpreter as their owner."""
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        prefix = ("unshare", "--user")
        if subprocess.run([*prefix, "true"], capture_output=True).returncode:
            pytest.skip("no user namespaces here to run the command without root")
    out = tmp_path / "cluster.json"
    done = cli(
        "--nodes", "2", "--rates", "1gbit", "--models", "tsm_resnet50",
        "--out-json", str(out), "--plot", str(tmp_path / "cluster.png"), prefix=prefix,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == "vidscale: error: bench cluster: network namespaces need root\n"
    assert not out.exists()


@pytest.mark.slow
def test_sigterm_mid_sweep_takes_the_cluster_down(netns_ok: None, tmp_path: Path) -> None:
    """SIGTERM while a pass's ranks run ends the command with 143, its namespaces, veths and
    torchrun agents gone (`netlab.link.ending_on_sigterm`: the default action would leave them)."""
    cmd = [sys.executable, "-m", "vidscale", "bench", "cluster", "--nodes", "2"]
    cmd += ["--rates", "1gbit", "--models", "tsm_resnet50", "--hooks", "none", "--epoch-k", "0"]
    cmd += ["--steps", "52"]  # a pass that lasts until the signal
    cmd += ["--out-json", str(tmp_path / "c.json"), "--plot", str(tmp_path / "c.png")]
    bench = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        started = ranks_started(bench)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if bench.poll() is None:  # a failed check above: the command must not outlive the test
            bench.send_signal(signal.SIGTERM)
            bench.wait(timeout=60)
    assert not [ns for ns in namespaces() if ns.startswith(f"{PREFIX}{bench.pid}-")]
    assert not [pid for pid in started if Path(f"/proc/{pid}").exists()]  # agents, ranks


def ranks_started(bench: subprocess.Popen[str]) -> set[int]:
    """Once `bench`'s two-node pass runs its ranks (after the link's probe): its processes."""
    assert bench.stdout is not None
    for line in bench.stdout:
        if line.startswith("bench cluster: 2 nodes at 1gbit"):
            break
    deadline = time.monotonic() + 120
    while bench.poll() is None and time.monotonic() < deadline:
        below = descendants(bench.pid)
        if sum("vidscale.bench.cluster.rank" in command(pid) for pid in below) == 2:
            return below
        time.sleep(0.2)
    raise AssertionError(f"no two ranks ran (exit status {bench.poll()})")


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:  # it ended meanwhile
        return ""


def descendants(pid: int) -> set[int]:
    """The processes below `pid` (from /proc's parent links)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def split_published(tmp_path: Path) -> list[Path]:
    """The published result's two runs (TSM-R50, then I3D-R50) as the two files they were
    recorded as, each cut to its two-node DDP and AAVG K=4 rows at both rates."""
    published = json.loads(PUBLISHED.read_text())
    files = []
    for run in (0, 1):
        recorded = {
            **published,
            "links": [link for link in published["links"] if link["run"] == run],
            "rows": [
                row
                for row in published["rows"]
                if row["run"] == run and row["nodes"] == 2 and row["variant"] in ("ddp", "aavg k=4")
            ],
        }
        files.append(tmp_path / f"run{run}.json")
        files[-1].write_text(json.dumps(recorded))
    return files


def test_combine_joins_two_recorded_results_without_root(tmp_path: Path) -> None:
    recorded = split_published(tmp_path)
    out, plot = tmp_path / "combined.json", tmp_path / "combined.png"  # the plot beside the JSON
    done = cli(
        "--combine", *map(str, recorded), "--check-against", str(NETWORK), "--out-json", str(out)
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert plot.stat().st_size > 0
    rows = json.loads(out.read_text())["rows"]
    published = [json.loads(path.read_text())["rows"] for path in recorded]
    assert len(rows) == 8 and [row["run"] for row in rows] == [0] * 4 + [1] * 4
    for row, before in zip(rows, published[0] + published[1], strict=True):
        assert {k: row[k] for k in ("rate", "model", "variant", "step_s")} == {
            k: before[k] for k in ("rate", "model", "variant", "step_s")
        }
        # each run's rows predicted from its own probes, as the published result's were
        assert row["predicted_step_s"] == pytest.approx(before["predicted_step_s"], rel=1e-9)
    # the table of the eight rows, then each beside its real two-node step (bench network)
    assert sum(" tsm_resnet50 " in line for line in done.stdout.splitlines()) == 8
    assert sum(" i3d_resnet50_3x3x3 " in line for line in done.stdout.splitlines()) == 8
    assert "stand-in" in done.stdout and f"wrote {out}, {plot}" in done.stdout
    assert "compute/control" in done.stdout  # each difference split: communication, compute
