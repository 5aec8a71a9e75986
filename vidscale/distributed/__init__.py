"""Processes together: one model trained by many ranks.

- `env` (the environment read once from the launcher), `collectives` (small ones, identity on one
  process), `traffic` (what a strategy sent: bytes, seconds, rounds).
- Strategies (`parallel` the interface, `strategy` the registry, `dist.strategy`), by subject:
  `sync/` (synchronous SGD with DDP's ring all-reduce and its gradient hooks) and `aavg/`
  (K-step model averaging with Adam and BN merging).
- `sync_batchnorm`: BN statistics synchronised over groups of processes (multigrid).
- `peers/`: a rank that fails stops the others within seconds; heartbeats; the link's probe.
- `ft/`: fault-tolerant replica groups on TorchFT (the optional `ft` extra): the settings, the
  JSON state transport, the shared data position, a group's manager and step exchange.
"""
