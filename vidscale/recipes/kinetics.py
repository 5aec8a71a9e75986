"""Kinetics-400 recipes from "Training Kinetics in 15 Minutes" (TSM paper §4).

Baseline: TSM-ResNet-50, 8 frames, 6 GPUs x 16 clips = 96, 100 epochs, lr 0.00125 per 8 clips
(linear scaling), cosine decay with 5 warmup epochs, weight decay 1e-4 on weights only (never BN
or bias), no dropout. ImageNet initialisation is a local torchvision ResNet-50 state_dict passed
as `--set model.pretrained=PATH`.
"""

from __future__ import annotations

from vidscale.config import DataConfig, RunConfig, TrainConfig
from vidscale.data.dataset import ClipSpec
from vidscale.models.registry import ModelConfig
from vidscale.optim.factory import OptimConfig
from vidscale.recipes.registry import register_recipe
from vidscale.schedules.lr import LRConfig


def kinetics_tsm(*, clips_per_gpu: int, epochs: int = 100) -> RunConfig:
    return RunConfig(
        model=ModelConfig(name="tsm_resnet50", num_classes=400, frames=8, dropout=0.0),
        data=DataConfig(
            batch_size=clips_per_gpu,
            workers=8,
            train_list="train.csv",
            val_list="val.csv",
            train_clip=ClipSpec(frames=8, crop_size=224, short_side=256, flip=True),
            eval_clip=ClipSpec(frames=8, crop_size=224, short_side=256, flip=False),
        ),
        optim=OptimConfig(name="sgd", lr_per_8_clips=0.00125, momentum=0.9, weight_decay=1e-4),
        lr=LRConfig(schedule="cosine", warmup_epochs=5.0),
        train=TrainConfig(epochs=epochs, keep_checkpoints=5),
    )


@register_recipe
def tsm_r50_k400_8f_b96_e100() -> RunConfig:
    """The paper's baseline: 6 GPUs x 16 clips = global batch 96 (74.12 +- 0.11% top-1)."""
    return kinetics_tsm(clips_per_gpu=16)
