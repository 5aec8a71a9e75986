"""Evaluating trained runs as the trainer evaluates them (its loaders and fast path, through
`train.builders`): `eval_run` (`vidscale eval RUN`: chosen test views, mean and std over the
last N checkpoints) and `two_stream_eval` (`vidscale eval --two-stream`: each stream and their
late fusion).
"""
