"""Something-Something v2 recipes (174 classes whose names say a direction, so no horizontal
flip: "pushing something from left to right" would become its mirror class).

- `tsm_r50_ssv2_8f_b64_e45`: the TSM code's SSv2 setting (mit-han-lab/temporal-shift-module,
  README "Training": `main.py something RGB --arch resnet50 --num_segments 8 --gd 20 --lr 0.01
  --lr_steps 20 40 --batch-size 64 --dropout 0.5 --shift --shift_div=8 --npb`, from ImageNet;
  its released SSv2 checkpoint is `..._segment8_e45.pth`, hence 45 epochs where the README's
  command says 50): 8 uniform segments, lr 0.01 for 64 clips (0.00125 per 8) divided by 10 at
  epochs 20 and 40, no warmup, weight decay 5e-4 (`opts.py`'s default, which that command
  keeps), gradients clipped to norm 20, `flip=False` as its `main.py` sets for Something
  datasets. ImageNet initialisation: `--set model.pretrained=PATH`. Evaluation: 1 clip, centre
  crop (the README's "efficient setting").
- `slowfast_r50_ssv2_16x8_multigrid_b128_e22`: PySlowFast
  `configs/SSv2/SLOWFAST_16x8_R50_multigrid.yaml`: SlowFast R50 (alpha 4, lateral kernel 7: the
  8x8 trunk, `slowfast_resnet50_8x8`) on 64 frames, so the Slow pathway sees 16; frames taken
  one per equal segment of the video as PySlowFast's SSv2 reader does (`sampling="uniform"`;
  short videos repeat frames), 8 GPUs x 16 clips, base LR 0.03 for the 128 clips, steps at
  epochs 14 and 18 of 22, 0.19 warmup epochs from 1e-4, weight decay 1e-6, dropout 0.5,
  precise BN over 200 batches, long and short multigrid cycles. Training clips are resized to a
  short side in `TRAIN_JITTER_SCALES` [256, 320] drawn inverse-uniformly
  (`INV_UNIFORM_SAMPLE: True`), then a random 224^2 crop, no flip (`RANDOM_FLIP: False`);
  evaluation takes the 224^2 centre of a 256 short side (the yaml tests on a 224 short side).
  Fine-tuned from the Kinetics SlowFast 8x8 (the yaml's `SLOWFAST_8x8_R50.pkl`):
  `--set model.init_from=RUN` of a `slowfast_r50_k400_8x8_multigrid_b64_e239` run.
"""

from __future__ import annotations

from dataclasses import replace

from vidscale.config import DataConfig, RunConfig, TrainConfig
from vidscale.data.clip import ClipSpec
from vidscale.models.registry import ModelConfig
from vidscale.optim.factory import OptimConfig
from vidscale.recipes.multigrid import BOTH_CYCLES
from vidscale.recipes.registry import register_recipe
from vidscale.schedules.lr import LRConfig

SSV2_CLASSES = 174
SLOWFAST_16X8_FRAMES = 64  # 16 Slow frames at alpha 4


@register_recipe
def tsm_r50_ssv2_8f_b64_e45() -> RunConfig:
    """TSM-R50, 8 segments, 8 GPUs x 8 clips, steps at 20 and 40 of 45 epochs, no flip (TSM code)."""
    clip = ClipSpec(frames=8, crop_size=224, short_side=256, flip=False)
    return RunConfig(
        model=ModelConfig(name="tsm_resnet50", num_classes=SSV2_CLASSES, frames=8, dropout=0.5),
        data=DataConfig(layout="ssv2", batch_size=8, workers=8, train_clip=clip, eval_clip=clip),
        optim=OptimConfig(
            name="sgd",
            lr_per_8_clips=0.00125,  # 0.01 for 64 clips
            momentum=0.9,
            weight_decay=5e-4,
            simulate_world_size=8,
            clip_grad_norm=20.0,
        ),
        lr=LRConfig(schedule="step", milestones=(20, 40), gamma=0.1, warmup_epochs=0.0),
        train=TrainConfig(epochs=45, keep_checkpoints=5),
    )


def slowfast_16x8_multigrid(
    data: DataConfig,
    *,
    num_classes: int,
    base_lr: float,
    milestones: tuple[int, ...],
    epochs: int,
    warmup_epochs: float,
    weight_decay: float,
) -> RunConfig:
    """PySlowFast's SlowFast 16x8 R50 multigrid fine-tuning on 8 GPUs x 16 clips: `base_lr` for
    the 128 clips, steps of 0.1 at `milestones`, warmup from 1e-4, Nesterov momentum 0.9,
    dropout 0.5, precise BN over 200 batches, long and short cycles."""
    gpus, clips_per_gpu = 8, 16
    return RunConfig(
        model=ModelConfig(
            name="slowfast_resnet50_8x8",
            num_classes=num_classes,
            frames=SLOWFAST_16X8_FRAMES,
            dropout=0.5,
        ),
        data=replace(data, batch_size=clips_per_gpu, workers=8),
        optim=OptimConfig(
            name="sgd",
            lr_per_8_clips=base_lr * 8 / (gpus * clips_per_gpu),
            momentum=0.9,
            nesterov=True,
            weight_decay=weight_decay,
            simulate_world_size=gpus,
        ),
        lr=LRConfig(
            schedule="step",
            milestones=milestones,
            gamma=0.1,
            warmup_epochs=warmup_epochs,
            warmup_start_factor=1e-4 / base_lr,
        ),
        train=TrainConfig(epochs=epochs, keep_checkpoints=5),
        multigrid=replace(BOTH_CYCLES, precise_bn_batches=200),
    )


@register_recipe
def slowfast_r50_ssv2_16x8_multigrid_b128_e22() -> RunConfig:
    """SlowFast-R50 16x8 on SSv2, 8 GPUs x 16 clips, long + short cycles (PySlowFast)."""
    clip = ClipSpec(frames=SLOWFAST_16X8_FRAMES, crop_size=224, short_side=256, flip=False)
    train_clip = replace(
        clip, crop="short_side_jitter", jitter=(256, 320), jitter_sampling="inverse_uniform"
    )
    return slowfast_16x8_multigrid(
        DataConfig(layout="ssv2", train_clip=train_clip, eval_clip=clip),
        num_classes=SSV2_CLASSES,
        base_lr=0.03,
        milestones=(14, 18),
        epochs=22,
        warmup_epochs=0.19,
        weight_decay=1e-6,
    )
