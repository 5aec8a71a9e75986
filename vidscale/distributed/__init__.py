"""Processes together: one model trained by many ranks.

- `env` (the environment read once from the launcher), `collectives` (small ones, identity on one
  process), `failure` (a rank that fails stops the others within seconds; `heartbeats` tells
  a silent peer from a slow one).
- Strategies (`parallel` the interface, `strategy` the registry, `dist.strategy`): `ddp`
  (synchronous SGD, ring all-reduce) with its gradient hooks (`comm_hooks`, `comm_handle`,
  `powersgd_hook`, timed by `comm_timing`, metered in `traffic`), and `aavg` (K-step model
  averaging with Adam and BN merging: `aavg`, `averaging`, `aavg_config`, `aavg_theory`).
- `sync_batchnorm`: BN statistics synchronised over groups of processes (multigrid).
- Measuring: `one_rank` (DDP and its hooks in a group of one, for what a hook costs),
  `link_probe` (a link's latency and bandwidth as gloo's all-reduce sees them).
"""
