"""Fault-tolerant replica groups on TorchFT (the optional `ft` extra; docs/fault_tolerance.md).

- `settings`: the `vidscale train-ft` settings (lighthouse, group, groups, minimum) and their
  checks, including that torchft is installed and the lighthouse answers.
- `transport`: the checkpoint transport that hands a rejoining group a live peer's state over
  the replica groups' own process group, described in JSON (never unpickled).
- `position`: the data position shared by every group: which samples a committed step took,
  so that none is lost or seen twice while groups leave and rejoin.
- `group`: a group's TorchFT manager and the step's exchange (pack, sum over the quorum,
  unpack).
- `launch`: groups and a lighthouse on one machine as processes (start, SIGKILL, logs).
- `averaging`: AAVG across groups through the quorum (parameters, BN statistics, moments).

The training loop that uses them is `vidscale.train.ft.training`.
"""
