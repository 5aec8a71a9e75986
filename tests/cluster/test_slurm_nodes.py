"""`scripts/slurm/train.sbatch` across nodes: a real SLURM whose compute nodes are network
namespaces on one shaped switch (`namespace_slurm`, `vidscale.netlab.cluster`), one slurmd each.

- `sbatch --nodes 2` trains the tiny demo with one rank per node, the rendezvous at the address
  SLURM gives the first node, gloo's traffic across the switch; `--nodes 4` likewise. Neither
  passes `--cpus-per-task`: the script's path where its srun arguments are an empty array (under
  `set -u`, fatal on bash < 4.4; `VIDSCALE_OLD_BASH=/path/to/bash-4.3` runs the jobs with it).
- One run is requeued mid-epoch (`scontrol requeue`), resumes, then has node 1's link pulled
  mid-epoch: every torchrun agent and rank, on both nodes, ends within
  `failure.job_end_bound_s` (node 1 cannot be reached: its processes end on their own); the
  link back, the failed job is requeued and finishes with every step loss and epoch metric of an
  uninterrupted run. srun, which never hears that node 1's task ended (the message is lost
  with the link), is ended by the script once the controller no longer knows the step.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.local_slurm import TERMINAL_STATES, free_port, unavailable_reason
from tests.cluster.namespace_slurm import NamespaceSlurm, torch_processes
from tests.cluster.test_slurm import history, log, log_srun_calls, wait_for_steps
from tests.tiny_run import tiny_overrides
from vidscale.distributed.peers.failure import job_end_bound_s
from vidscale.netlab.cluster import Cluster
from vidscale.netlab.link import Rate, namespaces

REPO = Path(__file__).resolve().parents[2]
SBATCH = REPO / "scripts" / "slurm" / "train.sbatch"
NODES = 4
EPOCHS = 6  # 16 tiny videos, 4 a rank: 2 steps an epoch on 2 nodes
SILENCE_S = 5.0
JOB_TIMEOUT_S = 300
LOST = r"vidscale: rank (\d) lost (rank \d|the store in [^(]+) \("

REQUIRED = os.environ.get("VIDSCALE_REQUIRE_SLURM") == "1"
if REQUIRED and unavailable_reason() is not None:
    pytest.fail(f"VIDSCALE_REQUIRE_SLURM=1 but {unavailable_reason()}", pytrace=False)
pytestmark = [
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def network(netns_ok: None) -> Iterator[Cluster]:
    with Cluster(NODES, rate=Rate.parse("1gbit"), host_port=True) as cluster:
        host_device = cluster.host_device
        yield cluster
    # Nothing left behind: the namespaces, the host's port on the switch.
    assert not {*cluster.namespaces, cluster.switch} & set(namespaces())
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f" {host_device}@" not in links and f" {host_device}:" not in links


@pytest.fixture(scope="module")
def slurm(network: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NamespaceSlurm]:
    cluster = NamespaceSlurm(tmp_path_factory.mktemp("slurm-nodes"), network)
    log_srun_calls(cluster)
    try:
        cluster.start()
        yield cluster
    finally:
        daemons = cluster.daemon_pids()
        cluster.stop()
    # Nothing left behind: munged, the controller, every node's slurmd, any job process.
    assert not [pid for pid in daemons if Path(f"/proc/{pid}").exists()]
    assert not cluster.job_processes()


def old_bash_path(root: Path) -> str:
    """A PATH prefix whose `bash` is $VIDSCALE_OLD_BASH, when set: the jobs' scripts (`#!/usr/bin/env
    bash`) and their per-node agents then run under it."""
    old = os.environ.get("VIDSCALE_OLD_BASH")
    if not old:
        return ""
    bin_dir = root / "old-bash"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "bash"
    if not link.exists():
        link.symlink_to(old)
    return f"{bin_dir}:"


def submit(
    slurm: NamespaceSlurm, data: Path, run: Path, *, nodes: int, epochs: int, tag: str
) -> int:
    """sbatch the training script for a tiny run, one rank on each of `nodes` nodes, without
    --cpus-per-task; its log is RUN.out."""
    train_args = ["--recipe", "demo_tsm_r18_8f_b32_e12", "--out", str(run)]
    for item in [
        *tiny_overrides(data),
        f"train.epochs={epochs}",
        "train.amp=off",
        "train.channels_last=off",
        "optim.simulate_world_size=0",
        f"dist.peer_silence_s={SILENCE_S}",
    ]:
        train_args += ["--set", item]
    env = {
        "VIDSCALE_SRUN_LOG": f"{run}.srun",
        "NPROC_PER_NODE": "1",
        "MAX_RESTARTS": "0",  # a failure ends the job: the requeue is the restart
        "RDZV_PORT": str(free_port()),
        "GLOO_SOCKET_IFNAME": slurm.network.devices[0],  # every node's interface has this name
        "VIDSCALE_TEST_TAG": tag,
        "PYTHONPATH": str(REPO),
        "PATH": old_bash_path(slurm.root) + slurm.env["PATH"],
    }
    return slurm.sbatch(
        f"--output={run}.out",
        f"--chdir={REPO}",
        f"--nodes={nodes}",
        str(SBATCH),
        *train_args,
        env=env,
    )


def bytes_through(network: Cluster, node: int) -> int:
    """Bytes node `node`'s switch port has received and sent (its veth's counters)."""
    port = network.node_port(node)
    done = subprocess.run(
        ["ip", "-n", port.ns_b, "-s", "-j", "link", "show", port.dev_b],
        capture_output=True,
        text=True,
        check=True,
    )
    stats = json.loads(done.stdout)[0]["stats64"]
    return int(stats["rx"]["bytes"]) + int(stats["tx"]["bytes"])


@pytest.fixture(scope="module")
def reference(
    slurm: NamespaceSlurm, tiny_demo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    run = tmp_path_factory.mktemp("slurm-nodes-runs") / "reference"
    before = bytes_through(slurm.network, 1)
    job = submit(slurm, tiny_demo, run, nodes=2, epochs=EPOCHS, tag="nodes-reference")
    state = slurm.wait_until(job, TERMINAL_STATES, timeout=JOB_TIMEOUT_S)
    assert state.state == "COMPLETED", log(run)
    (run.parent / "node1_bytes").write_text(str(bytes_through(slurm.network, 1) - before))
    return run


def test_a_two_node_job_trains_across_the_switch(slurm: NamespaceSlurm, reference: Path) -> None:
    steps, epochs = history(reference)
    assert [s for s, _ in steps] == list(range(1, 2 * EPOCHS + 1))
    assert [e["epoch"] for e in epochs] == list(range(1, EPOCHS + 1))
    assert json.loads((reference / "summary.json").read_text())["world_size"] == 2
    text = log(reference)
    assert "2 node(s) x 1 process(es), rendezvous node0 (10.232." in text, text
    assert "--cpus-per-task" not in Path(f"{reference}.srun").read_text()
    # Every step all-reduces the model's gradients (11 M parameters) through node 1's port.
    assert int((reference.parent / "node1_bytes").read_text()) > 2 * EPOCHS * 40e6


def test_a_four_node_job_trains(slurm: NamespaceSlurm, tiny_demo: Path, tmp_path: Path) -> None:
    run = tmp_path / "four"
    job = submit(slurm, tiny_demo, run, nodes=4, epochs=2, tag="nodes-four")
    state = slurm.wait_until(job, TERMINAL_STATES, timeout=JOB_TIMEOUT_S)
    assert state.state == "COMPLETED", log(run)
    steps, _ = history(run)
    assert [s for s, _ in steps] == [1, 2]  # 16 videos, 4 ranks x 4: one step an epoch
    assert json.loads((run / "summary.json").read_text())["world_size"] == 4
    assert "4 node(s) x 1 process(es)" in log(run)


def test_a_requeue_and_a_pulled_link_each_resume_exactly(
    slurm: NamespaceSlurm, tiny_demo: Path, tmp_path: Path, reference: Path
) -> None:
    run = tmp_path / "interrupted"
    tag = "nodes-interrupted"
    job = submit(slurm, tiny_demo, run, nodes=2, epochs=EPOCHS, tag=tag)
    wait_for_steps(run, 3)  # mid-epoch 2
    slurm.scontrol("requeue", str(job))
    slurm.start_now(job)
    wait_for_steps(run, 7, timeout=JOB_TIMEOUT_S)  # resumed; mid-epoch 4
    slurm.network.set_up(1, False)
    down = time.monotonic()
    try:
        while torch_processes(slurm, tag):
            assert time.monotonic() - down < 60, "the job's processes outlived the link by 60 s"
            time.sleep(0.05)
        ended_after = time.monotonic() - down
        time.sleep(3.0)  # node 1's word that its task ended is lost with the link
    finally:
        slurm.network.set_up(1, True)
    print(f"link pulled: every agent and rank of the 2-node job gone after {ended_after:.2f} s")
    assert ended_after < job_end_bound_s(SILENCE_S, 2)
    assert slurm.wait_until(job, TERMINAL_STATES, timeout=JOB_TIMEOUT_S).state == "FAILED"
    text = log(run)
    assert {int(rank) for rank, _ in re.findall(LOST, text)} == {0, 1}, text[-3000:]
    # srun never heard from node 1 and would wait for ever: the script ended it.
    assert "its step ended without srun hearing from every node" in text, text[-3000:]

    slurm.scontrol("requeue", str(job))
    slurm.start_now(job)
    state = slurm.wait_until(job, TERMINAL_STATES, timeout=JOB_TIMEOUT_S)
    text = log(run)
    assert state.state == "COMPLETED" and state.restarts == 2, text[-3000:]
    assert text.count("resuming") >= 2 and "(restart 2)" in text, text[-3000:]
    assert history(run) == history(reference)
