"""Two-node training over a real shaped link, and the link failing under it.

Two namespaces joined by a veth at 1 Gbit/s, one torchrun agent each (`vidscale.netlab`), a tiny
TSM run of 3 epochs x 4 steps. The link is pulled mid-epoch:

- left down: both ranks stop within the bound docs/resilience.md states and
  `failure.stop_bound_s` computes (the peer silence, 5 s here, one poll and 1 s), each saying
  in one line which rank it lost and in what phase; the whole job, both torchrun agents
  included, ends within `failure.job_end_bound_s` (the harness kills the agent left waiting for
  the store 1 s after the other failed, as `srun --kill-on-bad-exit` does); the link comes back
  and the same command (a requeue) resumes from the last checkpoint with the step losses of an
  uninterrupted run;
- down for 2 s, then up: TCP retransmits, the run rides through, same losses.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from tests.tiny_run import tiny_overrides
from vidscale.distributed.peers.failure import job_end_bound_s, stop_bound_s
from vidscale.netlab import nodes
from vidscale.netlab.link import Rate, TwoNodeLink
from vidscale.run.metrics import read_metrics

RATE = "1gbit"
SILENCE_S = 5.0
# From the link going down to both ranks' lines, and to the job's end: what the docs state.
STOP_BOUND_S = stop_bound_s(SILENCE_S, 2)
JOB_END_BOUND_S = job_end_bound_s(SILENCE_S, 2)
JOB_TIMEOUT_S = 240.0
# "vidscale: rank 0 lost rank 1 (no heartbeat for 5 s) in step 6 of epoch 2; stopping rank 0"
LOST = (
    r"vidscale: rank (\d) lost (rank \d|the store in [^(]+) \(.*\) in (\w+ .*?); stopping rank (\d)"
)


def command(data: Path, run: Path) -> list[str]:
    args = ["train", "--recipe", "demo_tsm_r18_8f_b32_e12", "--out", str(run)]
    for item in [
        *tiny_overrides(data),
        "data.batch_size=2",  # 2 ranks x 2 clips
        "train.epochs=3",
        "optim.simulate_world_size=0",
        f"dist.peer_silence_s={SILENCE_S}",
    ]:
        args += ["--set", item]
    return args


def losses(run: Path) -> list[tuple[int, float]]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [(r["step"], r["loss"]) for r in read_metrics(path) if r["kind"] == "train"]


def wait_for_step(job: nodes.TwoNodeJob, run: Path, step: int) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(losses(run)) < step:
        assert all(code is None for code in job.poll()), job.output(0)[-3000:]
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.05)


def train_two_nodes(link: TwoNodeLink, data: Path, run: Path) -> list[int]:
    job = nodes.start(link, command(data, run), log_dir=run.parent / f"{run.name}_logs")
    try:
        return job.wait(JOB_TIMEOUT_S)
    finally:
        job.stop()


@pytest.fixture(scope="module")
def reference(tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, float]]:
    """The step losses of an uninterrupted two-node run."""
    if shutil.which("ip") is None:
        pytest.skip("ip (iproute2) is not installed")
    run = tmp_path_factory.mktemp("reference") / "run"
    with TwoNodeLink() as link:
        link.shape(Rate.parse(RATE))
        assert train_two_nodes(link, tiny_demo, run) == [0, 0]
    found = losses(run)
    assert [step for step, _ in found] == list(range(1, 13))
    return found


@pytest.mark.slow
def test_a_link_left_down_stops_both_ranks_and_a_requeue_resumes_exactly(
    netns_ok: None, tiny_demo: Path, tmp_path: Path, reference: list[tuple[int, float]]
) -> None:
    run = tmp_path / "run"
    with TwoNodeLink() as link:
        link.shape(Rate.parse(RATE))
        job = nodes.start(link, command(tiny_demo, run), log_dir=tmp_path / "logs")
        try:
            wait_for_step(job, run, 6)  # in epoch 2, past its checkpoint at step 4
            link.set_up(False)
            down = time.monotonic()
            while len(re.findall(LOST, job.output(0) + job.output(1))) < 2:
                assert time.monotonic() - down < JOB_TIMEOUT_S, job.output(0)[-3000:]
                time.sleep(0.05)
            stopped_after = time.monotonic() - down
            codes = job.wait(JOB_TIMEOUT_S, kill_on_bad_exit=True)
            ended_after = time.monotonic() - down
        finally:
            job.stop()
        out = job.output(0) + job.output(1)
        print(
            f"link down: both ranks stopped after {stopped_after:.2f} s, the job {ended_after:.2f} s"
        )
        assert all(code != 0 for code in codes)
        assert SILENCE_S <= stopped_after < STOP_BOUND_S, out[-3000:]
        assert ended_after < JOB_END_BOUND_S, out[-3000:]  # both agents gone
        lost = re.findall(LOST, out)
        assert {int(r[0]) for r in lost} == {0, 1}, out[-3000:]
        assert all(r[0] == r[3] and ("step" in r[2] or "evaluation" in r[2]) for r in lost)
        assert not re.search(r'File ".*/vidscale/', out), out[-3000:]  # no worker traceback

        link.set_up(True)
        assert train_two_nodes(link, tiny_demo, run) == [0, 0]  # the same command again
    assert losses(run) == reference


@pytest.mark.slow
def test_a_link_down_for_two_seconds_is_ridden_through(
    netns_ok: None, tiny_demo: Path, tmp_path: Path, reference: list[tuple[int, float]]
) -> None:
    run = tmp_path / "run"
    with TwoNodeLink() as link:
        link.shape(Rate.parse(RATE))
        job = nodes.start(link, command(tiny_demo, run), log_dir=tmp_path / "logs")
        try:
            wait_for_step(job, run, 6)
            link.set_up(False)
            time.sleep(2.0)
            link.set_up(True)
            assert job.wait(JOB_TIMEOUT_S) == [0, 0], job.output(0)[-3000:]
        finally:
            job.stop()
        assert "lost" not in job.output(0) + job.output(1)
    assert losses(run) == reference


def test_the_agents_meet_at_node_0s_address() -> None:
    link = TwoNodeLink()
    cmd = nodes.agent_command(link, 1, ["train"], port=1234, run_id="r")
    text = " ".join(cmd)
    assert text.startswith(f"ip netns exec {link.namespaces[1]} ")
    assert f"--rdzv-endpoint {link.addresses[0]}:1234" in text
    assert "is_host=false" in text and f"--local-addr {link.addresses[1]}" in text
    assert cmd[-2:] == ["vidscale", "train"]
