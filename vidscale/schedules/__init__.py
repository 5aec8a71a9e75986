"""Everything that changes during training, as pure functions of progress.

- `lr` (warmup, then cosine, step, polynomial or constant) and `batch_scaling` (the peak rate as
  a function of the global batch, per optimizer).
- The multigrid schedule as PySlowFast computes it: `multigrid` (the schedule), `multigrid_spec`
  and `multigrid_config` (its knobs), `multigrid_shapes`, `multigrid_table`.
"""
