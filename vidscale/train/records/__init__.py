"""What a training run records of itself while it trains: `run_log` (the epoch's totals, the
console lines, the progress bar, `metrics.jsonl` through `run.metrics`), `summary` (the counters
merged into the run's `summary.json`), `loggers` (TensorBoard and the logger interface, with
`wandb_logger` for Weights & Biases) and `expected_time` (the run's expected duration from the
probe's step time).
"""
