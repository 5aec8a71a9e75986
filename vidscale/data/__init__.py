"""Clips in: from files on disk to batches on the device, by subject.

- The loading pipeline (this package's modules): `data_config` (the run's `data` section),
  `splits` (the class list and the items a run reads), `sources` (a `FrameSource` per storage),
  `clip` (the one clip-sampling path: `ClipSpec` + source -> views), `sampling`, `transforms`,
  `dataset` and `paired` (the datasets), `samplers`, `loaders` (the run's loaders),
  `targets` and `label_sets` (single- and multi-label targets), `inputs` (what a model takes),
  `read_health` (when a mostly unreadable set stops a run), `epoch_state`.
- `annotations`: the record type and the `path,label` CSV parser every layout shares.
- `layouts/`: the standard dataset layouts, read through one registry (Kinetics, UCF101,
  HMDB51, SSv2, Charades, ImageNet, generic, multilabel).
- `media/`: decoding and encoding video, optical flow.
- `prepared/`: the prepared shard format and `vidscale prepare`.
- `synthetic/`: the built-in demo datasets.
"""
