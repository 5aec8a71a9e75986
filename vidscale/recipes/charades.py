"""Charades recipe (157 classes, multi-label, scored by mAP): PySlowFast
`configs/Charades/SLOWFAST_16x8_R50_multigrid.yaml`.

SlowFast R50 (the 8x8 trunk, `slowfast_resnet50_8x8`) on 64 frames at stride 2 (16 Slow frames),
fine-tuned from the Kinetics SlowFast 8x8 (the yaml's `SLOWFAST_8x8_R50.pkl`:
`--set model.init_from=RUN` of a `slowfast_r50_k400_8x8_multigrid_b64_e239` run; its 400-class
head is left out), 8 GPUs x 16 clips, base LR 0.0375 for the 128 clips with steps at epochs 41
and 49 of 57 after 4 warmup epochs from 1e-4, weight decay 1e-4, dropout 0.5, precise BN over
200 batches, long and short multigrid cycles. Training clips are resized to a short side in
`TRAIN_JITTER_SCALES` [256, 340] drawn inverse-uniformly (`INV_UNIFORM_SAMPLE: True`), then a
random 224^2 crop and a flip. Labels are sets (`data.multi_label`: binary
cross-entropy on sigmoid outputs, the yaml's `bce_logit`); a training clip's positives are the
actions it overlaps. Testing takes 10 clips x 3 crops of 256 and keeps each class's maximum over
the views (`data.eval_aggregate=max`, the yaml's `ENSEMBLE_METHOD: max`). PySlowFast reads
Charades as 24 fps frames; `vidscale prepare --layout charades --fps 24` gives the same stride
in time.
"""

from __future__ import annotations

from dataclasses import replace

from vidscale.config import DataConfig, RunConfig
from vidscale.data.clip import ClipSpec
from vidscale.recipes.registry import register_recipe
from vidscale.recipes.ssv2 import SLOWFAST_16X8_FRAMES, slowfast_16x8_multigrid

CHARADES_CLASSES = 157


@register_recipe
def slowfast_r50_charades_16x8_multigrid_b128_e57() -> RunConfig:
    """SlowFast-R50 16x8 on Charades (multi-label, max over 10x3 views), long + short cycles."""
    clip = ClipSpec(
        frames=SLOWFAST_16X8_FRAMES, sampling="dense", stride=2, crop_size=224, short_side=256
    )
    train_clip = replace(
        clip, crop="short_side_jitter", jitter=(256, 340), jitter_sampling="inverse_uniform"
    )
    eval_clip = replace(clip, crop_size=256, flip=False, num_clips=10, num_crops=3)
    return slowfast_16x8_multigrid(
        DataConfig(
            layout="charades",
            multi_label=True,
            eval_aggregate="max",
            train_clip=train_clip,
            eval_clip=eval_clip,
        ),
        num_classes=CHARADES_CLASSES,
        base_lr=0.0375,
        milestones=(41, 49),
        epochs=57,
        warmup_epochs=4.0,
        weight_decay=1e-4,
    )
