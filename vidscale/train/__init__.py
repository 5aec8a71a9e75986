"""The loop and what uses one run.

- `loop`: `train()` and the `Trainer` (epochs, evaluation, batch adaptation), built by `builders`;
  each step is `step.run.train_step`; `wiring` builds its checkpointer and step context from its
  parts and ends its loader workers.
- Checkpoints: `state` (the registry of checkpointed parts), `checkpointer` (save, load, stop),
  `checkpoint` (atomic files, finding the one to resume), `record` (what a checkpoint says of
  how the run was made: its one writer and reader), `resume` (the plan rule).
- Survival: `resilience` (signals, the divergence guard), `watchdog` (hangs).
- Sizes and phases: `timeline`, `adaptive_batch`, `phase_switch`, `precise_bn`.
- Records: `run_log`, `metrics`, `summary` (the run's counters), `run_summary` (`summary.json`:
  its one writer and reader), `loggers` (+ `wandb_logger`), `expected_time`.
- Evaluation: `evaluate`, `average_precision`, `eval_run` (`vidscale eval`), `two_stream_eval`,
  `precision` (the arithmetic of every score);
  `run_ref` (a run on disk), `init_from` (`model.init_from`), `schedule_report`.
"""
