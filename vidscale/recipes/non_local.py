"""I3D-NL R50 on Kinetics-400 (Wang et al., "Non-local Neural Networks", CVPR 2018).

The schedule is PySlowFast's `configs/Kinetics/c2/I3D_NLN_8x8_R50.yaml`: 8 GPUs x 8 clips, SGD
with momentum 0.9, base LR 0.1 for the 64 clips, cosine decay over 196 epochs after 34 warmup
epochs from 0.01, weight decay 1e-4 (none on BN), dropout 0.5, and its "softmax" instantiation
(the embedded-Gaussian blocks) after res3 blocks 1, 3 and res4 blocks 1, 3, 5. The clip is
MMAction2's `i3d_imagenet-pretrained-r50-nl-*_8xb8-32x2x1-100e_kinetics400-rgb`: 32 frames at
stride 2 (the input the 3x1x1 trunk's temporal strides are built for; PySlowFast's 8x8 clip
goes with a trunk without them). The spatial augmentation is the yaml's: each training clip is
resized to a short side uniform in `TRAIN_JITTER_SCALES` [256, 320], then a random 224^2 crop
and a flip; evaluation takes the 224^2 centre of a 256 short side.
ImageNet initialisation (both sources start from it) is `--set model.pretrained=PATH`, and an
I3D run's weights `--set model.init_from=RUN`: the non-local blocks start as identities.

The network is the non-local paper's own, `i3d_nl_embedded_gaussian_resnet50_ref` (its released
code's and MMAction2's I3D R50 basis: 35,397,840 parameters with 400 classes, every tensor of
MMAction2's shape), not the TSM paper's Table 1 trunk (`i3d_nl_*_3x1x1`, 36,413,648), which
inflates a different set of blocks: these recipes reproduce the non-local paper and its zoos, so
their weights and accuracies must be comparable with them. `model.init_from` therefore takes an
`i3d_resnet50_ref` run (e.g. `i3d_r50_k400_32f_multigrid_b64_e100` with `--set
model.name=i3d_resnet50_ref`); a run of the Table 1 model `i3d_resnet50_3x1x1` has other shapes.
"""

from __future__ import annotations

from dataclasses import replace

from vidscale.config import DataConfig, RunConfig, TrainConfig
from vidscale.data.clip import ClipSpec
from vidscale.models.registry import ModelConfig
from vidscale.optim.factory import OptimConfig
from vidscale.recipes.multigrid import KINETICS_JITTER
from vidscale.recipes.registry import register_recipe
from vidscale.schedules.lr import LRConfig
from vidscale.schedules.multigrid_config import MultigridConfig

FRAMES, STRIDE = 32, 2


def i3d_nl_kinetics(*, gpus: int = 8, clips_per_gpu: int = 8) -> RunConfig:
    """The module docstring's recipe; `gpus` is recorded in `optim.simulate_world_size`."""
    clip = ClipSpec(frames=FRAMES, sampling="dense", stride=STRIDE, crop_size=224, short_side=256)
    return RunConfig(
        model=ModelConfig(
            name="i3d_nl_embedded_gaussian_resnet50_ref",
            num_classes=400,
            frames=FRAMES,
            dropout=0.5,
        ),
        data=DataConfig(
            layout="kinetics",
            batch_size=clips_per_gpu,
            workers=8,
            train_clip=replace(clip, crop="short_side_jitter", jitter=KINETICS_JITTER),
            eval_clip=replace(clip, flip=False),
        ),
        optim=OptimConfig(
            name="sgd",
            lr_per_8_clips=0.0125,  # 0.1 for 64 clips
            momentum=0.9,
            weight_decay=1e-4,
            simulate_world_size=gpus,
        ),
        lr=LRConfig(schedule="cosine", warmup_epochs=34.0, warmup_start_factor=0.1),
        train=TrainConfig(epochs=196, keep_checkpoints=5),
    )


@register_recipe
def i3d_nl_r50_k400_32f_b64_e196() -> RunConfig:
    """I3D-NL R50 (embedded Gaussian), 32 frames at stride 2, 8 GPUs x 8 clips, cosine LR."""
    return i3d_nl_kinetics()


@register_recipe
def i3d_nl_r50_k400_32f_multigrid_b64_e196() -> RunConfig:
    """The I3D-NL recipe with long + short multigrid cycles and precise BN over 200 batches."""
    cycles = MultigridConfig(long_cycle=True, short_cycle=True, precise_bn_batches=200)
    return replace(i3d_nl_kinetics(), multigrid=cycles)
