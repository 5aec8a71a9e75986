"""What feeding the step costs: `dataload` (a clip from each storage format), `data_wait` (the
share of a step blocked on data, Fig. 3b), `shard_train` (a model trained from prepared shards),
`flow` (optical flow extraction per CPU core); `bench_videos` makes the videos they read. Each
bench is `run(<Bench>Config, *, out_json, progress, ...)`, returning its typed result
(`DataResult`, `DataWaitResult`, `ShardTrainResult`, which `read`s its JSON back, `FlowResult`)."""
