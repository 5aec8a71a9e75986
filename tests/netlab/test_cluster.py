"""`vidscale.netlab.cluster`: N namespaces on one switch, each link shaped both ways, two racks
joined by a trunk, a torchrun job across them, and nothing left behind however it ends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vidscale.errors import InputError
from vidscale.netlab import nodes
from vidscale.netlab.cluster import Cluster
from vidscale.netlab.link import PREFIX, Rate, namespaces, sweep_stale
from vidscale.netlab.probe import throughput_bits

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster_nodes.py"


def host_links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_a_cluster_outside_2_to_16_nodes_is_refused() -> None:
    for bad in (1, 17):
        with pytest.raises(InputError, match=f"nodes {bad}: a cluster has 2 to 16 nodes"):
            Cluster(bad)
    with pytest.raises(InputError, match="racks 3"):
        Cluster(4, racks=3)


def test_the_script_names_a_bad_flag_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--nodes", "4", "--rate", "fast", "--hold"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "cluster_nodes: link rate 'fast': a rate such as 100mbit, 2gbit, or unshaped"
    ]


@pytest.mark.slow
def test_each_link_carries_its_rate_and_the_trunk_is_shared(netns_ok: None) -> None:
    """Four nodes on two racks: a node's link is capped both ways at its rate, a straggler's
    at its own, and traffic between racks at the trunk's."""
    with Cluster(4, rate=Rate.parse("200mbit"), racks=2, trunk=Rate.parse("50mbit")) as c:
        made = {c.switch, *c.namespaces}
        assert made <= set(namespaces())
        assert [c.rack_of(k) for k in range(4)] == [0, 0, 1, 1]
        same_rack = throughput_bits(c, seconds=1.0, sender=1, receiver=0)
        cross_rack = throughput_bits(c, seconds=1.0, sender=0, receiver=3)
        c.shape(Rate.parse("50mbit"), node=1)
        into_straggler = throughput_bits(c, seconds=1.0, sender=0, receiver=1)
    # A token bucket lets the first burst through, so a short stream reads a little over.
    assert 150e6 < same_rack < 1.25 * 200e6, same_rack
    assert 30e6 < cross_rack < 1.25 * 50e6, cross_rack
    assert 30e6 < into_straggler < 1.25 * 50e6, into_straggler
    assert not made & set(namespaces())


def test_every_node_reaches_every_other_and_the_host_port_all(netns_ok: None) -> None:
    with Cluster(3, racks=2, host_port=True) as c:
        assert c.host_address is not None and c.host_device is not None
        for node in range(3):
            for other in [*c.addresses, c.host_address]:
                ask = [*c.exec_prefix(node), sys.executable, "-c", CONNECT, other]
                assert subprocess.run(ask, capture_output=True, text=True).stdout.strip() == "up"
        c.set_up(2, False)
        ask = [*c.exec_prefix(0), sys.executable, "-c", CONNECT, c.addresses[2]]
        assert subprocess.run(ask, capture_output=True, text=True).stdout.strip() == "down"
        device = c.host_device
    assert f" {device}@" not in host_links()


# "up" when something answers (a refused connection is an answer), "down" on a timeout.
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 5998), timeout=1)
except ConnectionRefusedError:
    print("up")
except OSError:
    print("down")
"""


def held(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """scripts/cluster_nodes.py --hold, started and waited for until its layout is written."""
    layout = tmp_path / "cluster.json"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--hold", "--describe", str(layout), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not layout.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert layout.is_file(), proc.communicate(timeout=10)[0]
    return proc, json.loads(layout.read_text())


def test_sigterm_to_the_script_removes_everything(netns_ok: None, tmp_path: Path) -> None:
    proc, layout = held(tmp_path, "--nodes", "5", "--rate", "1gbit", "--host-port")
    made = [node["namespace"] for node in layout["nodes"]]  # type: ignore[attr-defined]
    assert len(made) == 5 and set(made) <= set(namespaces())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not set(made) & set(namespaces())
    assert f"vsh{proc.pid % 10_000_000}" not in host_links()


def test_a_killed_harness_leaves_what_the_next_sweeps(netns_ok: None, tmp_path: Path) -> None:
    proc, _ = held(tmp_path, "--nodes", "3", "--host-port")
    proc.kill()
    proc.wait(timeout=10)
    left = [ns for ns in namespaces() if ns.startswith(f"{PREFIX}{proc.pid}-")]
    assert len(left) == 4, left  # three nodes and the switch
    assert set(left) <= set(sweep_stale())
    assert not [ns for ns in namespaces() if ns.startswith(f"{PREFIX}{proc.pid}-")]
    deadline = time.monotonic() + 10  # the host port goes with the switch's namespace
    while f"vsh{proc.pid % 10_000_000}@" in host_links() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert f"vsh{proc.pid % 10_000_000}@" not in host_links()


@pytest.mark.slow
def test_a_torchrun_job_spans_four_nodes_on_two_racks(netns_ok: None, tmp_path: Path) -> None:
    """One agent per node, the rendezvous at node 0's address, a gloo all-reduce across both
    racks: every rank sees the sum of all four."""
    with Cluster(4, rate=Rate.parse("1gbit"), racks=2, trunk=Rate.parse("1gbit")) as c:
        job = nodes.start(
            c,
            [],
            log_dir=tmp_path,
            module="tests.netlab.allreduce_worker",
            env={"PYTHONPATH": str(ROOT)},
        )
        try:
            codes = job.wait(180)
        finally:
            job.stop()
        outputs = [job.output(k) for k in range(4)]
    assert codes == [0, 0, 0, 0], outputs
    for out in outputs:
        assert "allreduce world=4 got=10 want=10" in out, out
