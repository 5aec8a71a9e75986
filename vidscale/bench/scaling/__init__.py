"""`vidscale bench scaling`: training speed against the number of processes. `measure` launches
`worker` ranks with torchrun for each world size in `config`; `data` feeds them real clips
(`--data`); `report` computes speed-up and efficiency, the table and the JSON the planner reads.
`measure.run(ScalingConfig, *, out_json, progress, plot, baseline)` returns that report typed
(`result.ScalingResult`), which `ScalingResult.read` parses back for `plan --measured`."""
