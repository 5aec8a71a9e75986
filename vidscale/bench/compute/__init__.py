"""What a model's step costs on this device: `models` (`vidscale bench models`, Tables 1-2 with
`models_table` and `model_ratios`), `throughput` (clips/s and MFU), `profile` (where a step's time
goes), `flops` (parameters, MACs, Compute/IO); `train_step` is the step they time. Each bench
is `run(<Bench>Config, *, out_json, progress, device)`, returning its typed result
(`ModelsResult`, `ThroughputResult`, `ProfileResult`; the last two `read` their JSON back)."""
