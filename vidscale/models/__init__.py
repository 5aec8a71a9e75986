"""The video models on one ResNet trunk, and the image models whose trunk they start from.

- `registry`: one builder per public name (`vidscale models`), `ModelConfig`.
- `resnet` (the trunk: 2D per frame, shifted or inflated; `conv`, its exact convolutions),
  `temporal_shift` and `tsm` (TSN, TSM), `i3d` (the TSM paper's Table 1 I3D and the non-local
  reference I3D, with `nonlocal_block`), `slowfast`, `image` (ResNet, AlexNet-BN).
- `costs`: what a model costs per clip, counted once (parameters and MACs per layer and in
  total, Compute/IO): `vidscale info`, the benches, the planner and the studies read it.
- `batchnorm` (sub-batch BN), `pretrained` (ImageNet weights from a torchvision state_dict),
  `transfer` (one trained model's weights for another: cross-modality, fine-tuning).
"""
