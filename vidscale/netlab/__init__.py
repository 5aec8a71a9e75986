"""A cluster's network on one machine: namespaces, veth links shaped by `tc`, torchrun agents.

`link` makes two namespaces and the link between them (and undoes them, and sweeps what a killed
harness left), `cluster` N nodes (2 to 16) on one switch, a bridge in a namespace of its own,
each node's link shaped both ways, optionally two racks joined by a trunk; `nodes` starts a
`python -m vidscale ...` job with one torchrun agent per node of either, `probe` measures a
link's TCP throughput. `scripts/two_nodes.py` and `scripts/cluster_nodes.py` are the
command-line harnesses; `vidscale bench network` measures scaling across link rates with them.
"""
