"""`vidscale.netlab.link`: two namespaces, a veth between them, shaped by tc, and nothing left."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from vidscale.errors import InputError
from vidscale.netlab.link import PREFIX, Rate, TwoNodeLink, namespaces, sweep_stale

# Sends for SECONDS through the link and prints the bits per second the receiver got.
SENDER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5999)); buf = b"x" * (1 << 16); t = time.time()
while time.time() - t < float(sys.argv[2]): c.sendall(buf)
c.close()
"""
RECEIVER = """
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5999)); s.listen(1); c, _ = s.accept(); n = 0; t = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    t = t or time.time(); n += len(b)
print(n * 8 / (time.time() - t))
"""


def test_rates_parse_and_bad_ones_name_the_value() -> None:
    assert Rate.parse("100mbit").bits_per_s == 100e6
    assert Rate.parse("2gbit").bits_per_s == 2e9
    assert Rate.parse("1.5Gbit").label == "1.5gbit"
    assert Rate.parse("unshaped").bits_per_s is None
    assert Rate.parse("500mbit").bytes_per_s == 62.5e6
    for bad in ("fast", "0mbit", "100mb", "-1gbit"):
        with pytest.raises(InputError, match="link rate"):
            Rate.parse(bad)


def throughput(link: TwoNodeLink, seconds: float = 2.0) -> float:
    """Bits per second from node 0 to node 1, measured with a TCP stream."""
    receiver = subprocess.Popen(
        [*link.exec_prefix(1), sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True
    )
    time.sleep(0.5)
    sender = [*link.exec_prefix(0), sys.executable, "-c", SENDER]
    subprocess.run([*sender, link.addresses[1], str(seconds)], check=True, timeout=30)
    out, _ = receiver.communicate(timeout=30)
    return float(out)


@pytest.mark.slow
def test_a_shaped_link_carries_its_rate_and_is_removed_after(netns_ok: None) -> None:
    with TwoNodeLink() as link:
        made = set(link.namespaces)
        assert made <= set(namespaces())
        link.shape(Rate.parse("100mbit"))
        shaped = throughput(link)
        link.shape(Rate.parse("unshaped"))
        unshaped = throughput(link)
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
