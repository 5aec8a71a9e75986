"""The loop that trains a run (what a run on disk holds and how scores are computed are below
it: `run/`, `scoring/`).

- `loop`: `train()` and the `Trainer` (epochs, evaluation, batch adaptation), built by `builders`;
  each step is `step.run.train_step`; `wiring` builds its checkpointer and step context from its
  parts and ends its loader workers.
- Checkpoints: `checkpoints/` (`state`, the registry of checkpointed parts; `checkpointer`:
  save, load, stop; `resume`: the newest loadable checkpoint, the plan rule).
- Survival: `survival/` (`resilience`: signals, the divergence guard; `watchdog`: hangs).
- Fault-tolerant replica groups on TorchFT (`vidscale train-ft`): `ft/` (`training`, the loop;
  `replica`, one process's replica and the LR rule; `rounds`, local steps and K-step averaging:
  AAVG or TorchFT's LocalSGD).
- Sizes and phases: `phases/` (`adaptive_batch`, `phase_switch`, `precise_bn`).
- Records: `records/` (`run_log`, `summary`: the run's counters, `loggers` + `wandb_logger`,
  `expected_time`).
- Evaluation of runs: `evaluation/` (`eval_run`, `vidscale eval`; `two_stream_eval`); `init_from`
  (`model.init_from`), `schedule_report`.
"""
