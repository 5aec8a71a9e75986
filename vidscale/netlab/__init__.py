"""A two-node network on one machine: namespaces, a veth link shaped by `tc`, torchrun agents.

`link` makes the two namespaces and the link between them (and undoes them), `nodes` starts a
`python -m vidscale ...` job with one torchrun agent per namespace, `probe` measures the
link's TCP throughput. `scripts/two_nodes.py` is the command-line harness; `vidscale bench
network` measures scaling across link rates with it.
"""
