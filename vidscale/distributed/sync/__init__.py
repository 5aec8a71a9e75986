"""Synchronous data-parallel SGD (TSM paper §4): `ddp` (DistributedDataParallel set up as
training runs it, ring all-reduce of the gradients), its gradient hooks (`comm_hooks`, the
registry and fp16/bf16 compression; `powersgd_hook`; `comm_handle`, a hook's state as a run
checkpoints it), timed by `comm_timing`, and `one_rank` (DDP and a hook in a group of one, to
measure what the hook itself computes).
"""
