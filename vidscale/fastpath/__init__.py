"""The arithmetic a run trains in (fp32, bf16 autocast, channels-last), chosen by measurement.

- `settings`: what a setting turns on (`FastPath`, `Candidate`) and what a device can do.
- `probe`: the decision of `train.amp` / `train.channels_last` = auto (a `decision`), the resume
  rule, the cache (`cache`); `trials` times the candidates (the trainer's step, `step.fixed_batch`) with
  `timing`'s round-robin after `gradients` has left out every candidate whose gradients are not
  fp32's, `rule` chooses, `isolation` runs it all in a child process.
- `subject`: the benchmark subject, a model at a setting training on one fixed random batch with
  the trainer's step: what the probe and the benches that time a step build.
- `hardware` (the machine, its load, its peak FLOP/s), `host_memory` (glibc retention on CPU) and
  `threads` (each process's share of the node's CPUs).
"""
