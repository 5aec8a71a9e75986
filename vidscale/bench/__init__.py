"""Measurements on this device, as commands (`vidscale bench ...`) that print a table and write
JSON; timings are ratios against a baseline measured in the same run. By subject:

- `compute/`: the model's step and forward (`models`: the TSM paper's Tables 1-2; `throughput`
  and MFU; `profile`; `flops`), all timing the one benchmark subject (`fastpath.subject`,
  built by `train_step` for a given setting): the trainer's step, each step's update counted
  and a row none of whose steps applied refused.
- `data/`: feeding it (`dataload`: what a clip costs per storage; `data_wait`: how much of a
  step waits; `shard_train`; `flow`: optical flow speed).
- `scaling/`: processes together (`measure` launches `worker` ranks; `config`, `data`, `report`).
- `network/`: one node against two across a shaped link (`measure`, `config`, `report`, and
  `hook_cost`: a gradient hook's own compute on one process).
- `cluster/`: 2 to 16 nodes on one machine's shaped network, ranks whose compute is a stand-in
  (`standin`: the real parameters, measured waits; `rank`: one stand-in rank under torchrun;
  `config`, `measure`, `report`: the sweep, its rows and the planner's predictions).
- `multigrid`: what multigrid's schedule saves; `gpu_report`: the GPU acceptance run's report.

Each bench's settings are its `<Bench>Config`'s fields, declared with `options.option` (help,
bounds, choices; the settings most benches share declared there once); the CLI derives the
bench's flags from them and `options.check_options` checks them, naming the flag.

Each bench module's entry point is `run(<Bench>Config, *, out_json, progress=False, device=...)`,
which writes its JSON atomically and returns a frozen `<Bench>Result` whose `to_dict()` is that
JSON; the results other code reads (`scaling`, `throughput`, `profile`, `shard_train`) parse it
back with `from_dict` / `read(path)`, naming the file and the key of a bad one (`results`).
"""
