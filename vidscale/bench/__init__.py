"""Measurements on this device, as commands (`vidscale bench ...`) that print a table and write
JSON; timings are ratios against a baseline measured in the same run. By subject:

- `compute/`: the model's step and forward (`models`: the TSM paper's Tables 1-2; `throughput`
  and MFU; `profile`; `flops`), all timing `step.fixed_batch.FixedBatchStep` (`train_step`).
- `data/`: feeding it (`dataload`: what a clip costs per storage; `data_wait`: how much of a
  step waits; `shard_train`; `flow`: optical flow speed).
- `scaling/`: processes together (`measure` launches `worker` ranks; `config`, `data`, `report`).
- `multigrid`: what multigrid's schedule saves; `gpu_report`: the GPU acceptance run's report.
"""
