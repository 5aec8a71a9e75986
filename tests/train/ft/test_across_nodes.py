"""Fault-tolerant replica groups across nodes (`vidscale train-ft --address`): one group per
namespace of a `vidscale.netlab` cluster, each link shaped, the lighthouse on node 0, every
group reaching it and its peer over the switch. A group SIGKILLed mid-run comes back and
rejoins; the same checks as on one machine (tests/train/ft/test_training.py); and what the
groups' processes listen on is the node's address, not every interface."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.train.ft.ft_groups import check_equal_final_states, check_samples_once, start_group
from vidscale.cli import main
from vidscale.distributed.ft.launch import Lighthouse, finish, kill_group, records, wait_for
from vidscale.netlab.cluster import Cluster
from vidscale.netlab.link import Rate, namespaces

#: The torchrun agent's stores (its rendezvous and its workers' TCPStore) are torch's, which
#: listen on every interface of the node; docs/design.md says so.
AGENT = "pt_elastic"


def listeners(cluster: Cluster, node: int) -> list[tuple[str, str]]:
    """(local address:port, process name) of every TCP listener in node `node`'s namespace."""
    cmd = [*cluster.exec_prefix(node), "ss", "-Hltnp"]
    found = []
    for line in subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines():
        words = line.split()
        found.append((words[3], words[5].split('"')[1] if '"' in words[5] else "?"))
    return found


@pytest.mark.slow
def test_groups_on_two_nodes_over_a_shaped_link_survive_a_kill(
    netns_ok: None, tiny_demo: Path, tmp_path: Path
) -> None:
    epochs = 4
    started: list[subprocess.Popen] = []
    with Cluster(2, rate=Rate.parse("1gbit")) as cluster:
        made = {cluster.switch, *cluster.namespaces}

        def start(group: int) -> subprocess.Popen:
            node: dict[str, Any] = {
                "prefix": cluster.exec_prefix(group),
                "address": cluster.addresses[group],
                "device": cluster.devices[group],
            }
            process = start_group(
                group, 2, data=tiny_demo, out=tmp_path, lighthouse=lh.address, epochs=epochs, **node
            )
            started.append(process)
            return process

        lh = Lighthouse.start(
            tmp_path / "lighthouse.log", host=cluster.addresses[0], prefix=cluster.exec_prefix(0)
        )
        try:
            survivor, victim = start(0), start(1)
            wait_for(lambda: len(records(tmp_path, 1)) >= 4, 120, "group 1's 4th step")
            bound = [listeners(cluster, node) for node in range(2)]
            kill_group(victim)
            killed_after = len(records(tmp_path, 1))
            last_before = records(tmp_path, 1)[-1]["step"]
            back = start(1)
            assert finish(survivor, 120, tmp_path, 0) == 0
            assert finish(back, 60, tmp_path, 1) == 0
        finally:
            for process in started:
                if process.poll() is None:
                    kill_group(process)
            lh.kill()
    assert not made & set(namespaces()), "a namespace outlived its cluster"
    # The lighthouse, each group's manager and its gloo pairs: on the node's address only.
    for node, found in enumerate(bound):
        own = [where for where, name in found if name != AGENT]
        assert own and all(w.startswith(f"{cluster.addresses[node]}:") for w in own), found
    alone, rejoined = records(tmp_path, 0), records(tmp_path, 1)[killed_after:]
    steps = [r["step"] for r in alone]
    assert steps == list(range(steps[0], steps[0] + len(steps))), "the survivor stopped"
    assert any(r["participants"] == 1 for r in alone if r["step"] > last_before)
    assert rejoined and rejoined[0]["healed"] and rejoined[0]["step"] > last_before
    assert any(r["participants"] == 2 for r in rejoined)
    check_samples_once([alone, records(tmp_path, 1)], epochs)
    check_equal_final_states(tmp_path, 2, epochs)


def test_an_address_not_of_this_node_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["train-ft", "--recipe", "demo_tsm_r18_8f_b32_e12", "--out", "unused"]
    base += ["--lighthouse", "127.0.0.1:1", "--groups", "2", "--group", "0"]
    for address, why in (("node0", "is not an IP address"), ("192.0.2.7", "is not an address")):
        assert main([*base, "--address", address]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert err.startswith("vidscale: error: --address: ") and why in err, err
