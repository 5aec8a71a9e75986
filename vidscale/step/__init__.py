"""One optimizer step, the same wherever a step is run or timed.

- `run`: `train_step(ctx, batches, accumulate=, clips=, lr=)`, the trainer's step (micro-batches
  under the strategy's sync context and the fast path's autocast, the gradient norm, the
  agreement over ranks, the update if finite), and `forward_backward`, one micro-batch of it.
- `objective`: the loss and top-1 of a run (cross-entropy, or binary for multi-label data).
- `agreement`: the one small all-reduce a step ends with, the gradient norm, and what was first
  not finite in a step that was skipped.
- `applied`: whether the steps a bench timed trained (`AppliedSteps`); a bench row none of whose
  steps applied an update is refused (`NothingTrained`).
- `fixed_batch`: `FixedBatchStep`, that step on a fixed random batch: what the fast-path probe
  and every bench time.
"""
