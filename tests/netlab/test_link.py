"""`vidscale.netlab.link`: two namespaces, a veth between them, shaped by tc, and nothing left."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vidscale.errors import InputError
from vidscale.netlab.link import PREFIX, Rate, TwoNodeLink, namespaces, sweep_stale
from vidscale.netlab.probe import throughput_bits


def test_rates_parse_and_bad_ones_name_the_value() -> None:
    assert Rate.parse("100mbit").bits_per_s == 100e6
    assert Rate.parse("2gbit").bits_per_s == 2e9
    assert Rate.parse("1.5Gbit").label == "1.5gbit"
    assert Rate.parse("unshaped").bits_per_s is None
    assert Rate.parse("500mbit").bytes_per_s == 62.5e6
    for bad in ("fast", "0mbit", "100mb", "-1gbit"):
        with pytest.raises(InputError, match="link rate"):
            Rate.parse(bad)


@pytest.mark.slow
def test_a_shaped_link_carries_its_rate_and_is_removed_after(netns_ok: None) -> None:
    with TwoNodeLink() as link:
        made = set(link.namespaces)
        assert made <= set(namespaces())
        link.shape(Rate.parse("100mbit"))
        shaped = throughput_bits(link)
        link.shape(Rate.parse("unshaped"))
        unshaped = throughput_bits(link)
    # The token bucket caps the rate (a little over it while the first burst drains); without
    # it the veth carries several times as much, so the cap is the shaper's.
    assert 50e6 < shaped < 1.2 * 100e6, shaped
    assert unshaped > 3 * shaped, (unshaped, shaped)
    assert not made & set(namespaces())
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "vsnet" not in links and "vst" not in links


def test_a_link_that_goes_down_carries_nothing_until_up(netns_ok: None) -> None:
    with TwoNodeLink() as link:
        ping = [*link.exec_prefix(0), sys.executable, "-c", CONNECT, link.addresses[1]]
        link.set_up(False)
        assert subprocess.run(ping, capture_output=True, text=True).stdout.strip() == "down"
        link.set_up(True)
        assert subprocess.run(ping, capture_output=True, text=True).stdout.strip() == "up"


# "up" when something answers (a refused connection is an answer), "down" on a timeout.
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 5998), timeout=2)
except ConnectionRefusedError:
    print("up")
except OSError:
    print("down")
"""


def test_namespaces_of_a_dead_creator_are_swept(netns_ok: None) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"{PREFIX}{dead.pid}-0-0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    assert stale in sweep_stale()
    assert stale not in namespaces()
