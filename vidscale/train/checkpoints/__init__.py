"""A training run's checkpoints as the trainer keeps them: `state` (the registry of checkpointed
parts, torchtitan's `Stateful` as the model), `checkpointer` (save, load, stop: the parts in one
file per epoch, written atomically on rank 0) and `resume` (the newest loadable checkpoint, and
the plan rule a resumed run follows). What a checkpoint file holds on disk is `run.checkpoint`.
"""
