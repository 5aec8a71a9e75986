"""What a network's link carries (a `TwoNodeLink`'s or a `Cluster`'s), measured with plain TCP
between namespaces: the throughput of one stream from one node to another (node 0 to node 1
by default), by a short Python program in each namespace (the receiver's clock is the one read).
"""

from __future__ import annotations

import subprocess
import sys
import time

from vidscale.netlab.link import Network

PORT = 5999
_SENDER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); buf = b"x" * (1 << 16)
t = time.time()
while time.time() - t < float(sys.argv[3]): c.sendall(buf)
c.close()
"""
_RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); c, _ = s.accept(); n = 0; t = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    t = t or time.time(); n += len(b)
print(n * 8 / (time.time() - t))
"""


def _serve_and_run(
    link: Network, server: str, client: list[str], *, timeout: float, nodes: tuple[int, int]
) -> str:
    """Start `server` on node `nodes[1]`, run the client program on `nodes[0]`; the output it
    names."""
    serving = subprocess.Popen(
        [*link.exec_prefix(nodes[1]), sys.executable, "-c", server, str(PORT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.3)  # the server listens
        done = subprocess.run(
            [*link.exec_prefix(nodes[0]), sys.executable, "-c", *client],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        out, _ = serving.communicate(timeout=timeout)
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait()
    return out if out.strip() else done.stdout


def throughput_bits(
    link: Network, *, seconds: float = 2.0, sender: int = 0, receiver: int = 1
) -> float:
    """Bits per second one TCP stream carries from node `sender` to node `receiver`."""
    client = [_SENDER, link.addresses[receiver], str(PORT), str(seconds)]
    done = _serve_and_run(link, _RECEIVER, client, timeout=seconds + 30, nodes=(sender, receiver))
    return float(done)
