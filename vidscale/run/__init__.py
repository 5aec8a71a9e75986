"""A run on disk, below the trainer that writes it: what predict, export, eval, the weights
importers, feature extraction and the studies read of a run, without importing the trainer.

- `checkpoint` (atomic checkpoint files, finding and reading them, a damaged one named in one
  line), `record` (what a checkpoint says of how the run was made: its one writer and reader),
  `summary` (`summary.json`: its one writer and reader), `metrics` (`metrics.jsonl`: the writer
  with the run's loggers, the readers, the progress bar and the plots).
- `ref` (a run directory or a checkpoint in one: its config, class names, checkpoints; the
  config an evaluation resolves), `data` (the run's splits and the config they complete),
  `timeline` (the run's sizes, phases and LR as pure functions of its config and progress).
"""
