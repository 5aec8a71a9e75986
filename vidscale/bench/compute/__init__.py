"""What a model's step costs on this device: `models` (`vidscale bench models`, Tables 1-2 with
`models_table` and `model_ratios`), `throughput` (clips/s and MFU), `profile` (where a step's time
goes), `flops` (parameters, MACs, Compute/IO); `train_step` is the step they time."""
