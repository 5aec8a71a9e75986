"""Multigrid recipes (Wu et al., "A Multigrid Method for Efficiently Training Video Models").

- `slowfast_r50_k400_8x8_multigrid_b64_e239`: PySlowFast's
  `configs/Kinetics/SLOWFAST_8x8_R50_stepwise_multigrid.yaml` (8 GPUs x 8 clips, 32 frames at
  stride 2, base LR 0.1 with steps at epochs 94, 154, 196 of 239, 34 warmup epochs from 0.01,
  long and short cycles; training clips resized to a short side uniform in
  `TRAIN_JITTER_SCALES` [256, 320], a random 224^2 crop and a flip): `vidscale schedule`
  prints the per-epoch schedule PySlowFast's own code produces for it. The multigrid stages
  rescale the run to 358 epochs.
- TSM and I3D on Kinetics with both cycles on top of their usual recipes (cosine LR: the
  batch-factor scaling applies on top of the cosine, where PySlowFast supports steps only).
  The I3D clip is trained with the same short-side jitter [256, 320], the crop of PySlowFast's
  `configs/Kinetics/I3D_8x8_R50.yaml`; the TSM one keeps TSM's multi-scale crop.
- The demo with multigrid, for the speed study on a CPU (`docs/benchmarks.md`).
"""

from __future__ import annotations

from dataclasses import replace

from vidscale.config import DataConfig, RunConfig, TrainConfig
from vidscale.data.clip import ClipSpec
from vidscale.models.registry import ModelConfig
from vidscale.optim.factory import OptimConfig
from vidscale.recipes.demo import demo_tsm_r18_8f_b32_e12
from vidscale.recipes.kinetics import kinetics_tsm
from vidscale.recipes.registry import register_recipe
from vidscale.schedules.lr import LRConfig
from vidscale.schedules.multigrid_config import MultigridConfig

BOTH_CYCLES = MultigridConfig(long_cycle=True, short_cycle=True)
KINETICS_JITTER = (256, 320)  # PySlowFast's Kinetics DATA.TRAIN_JITTER_SCALES


def _kinetics_dense(
    model: str, *, frames: int, stride: int, gpus: int, clips_per_gpu: int
) -> RunConfig:
    """Kinetics-400 with dense clips (I3D / SlowFast sampling and short-side jitter), SGD
    momentum 0.9, wd 1e-4."""
    return RunConfig(
        model=ModelConfig(name=model, num_classes=400, frames=frames, dropout=0.5),
        data=DataConfig(
            layout="kinetics",
            batch_size=clips_per_gpu,
            workers=8,
            train_clip=ClipSpec(
                frames=frames,
                sampling="dense",
                stride=stride,
                crop_size=224,
                short_side=256,
                crop="short_side_jitter",
                jitter=KINETICS_JITTER,
            ),
            eval_clip=ClipSpec(
                frames=frames,
                sampling="dense",
                stride=stride,
                crop_size=224,
                short_side=256,
                flip=False,
            ),
        ),
        optim=OptimConfig(
            name="sgd",
            lr_per_8_clips=0.0125,  # 0.1 for 64 clips
            momentum=0.9,
            weight_decay=1e-4,
            simulate_world_size=gpus,
        ),
        lr=LRConfig(schedule="cosine", warmup_epochs=5.0),
        train=TrainConfig(epochs=100, keep_checkpoints=5),
        multigrid=BOTH_CYCLES,
    )


@register_recipe
def slowfast_r50_k400_8x8_multigrid_b64_e239() -> RunConfig:
    """SlowFast-R50 8x8, 8 GPUs x 8 clips, stepwise LR, long + short cycles (PySlowFast)."""
    cfg = _kinetics_dense("slowfast_resnet50_8x8", frames=32, stride=2, gpus=8, clips_per_gpu=8)
    return replace(
        cfg,
        optim=replace(cfg.optim, nesterov=True),
        lr=LRConfig(
            schedule="step",
            milestones=(94, 154, 196),
            gamma=0.1,
            warmup_epochs=34.0,
            warmup_start_factor=0.1,  # from 0.01 to 0.1
        ),
        train=replace(cfg.train, epochs=239),
        multigrid=replace(BOTH_CYCLES, precise_bn_batches=200),
    )


@register_recipe
def i3d_r50_k400_32f_multigrid_b64_e100() -> RunConfig:
    """I3D-R50 3x1x1, 32 frames at stride 2, 8 GPUs x 8 clips, cosine LR, long + short cycles."""
    return _kinetics_dense("i3d_resnet50_3x1x1", frames=32, stride=2, gpus=8, clips_per_gpu=8)


@register_recipe
def tsm_r50_k400_8f_multigrid_b96_e100() -> RunConfig:
    """The TSM paper's baseline recipe (6 GPUs x 16 clips, cosine) with long + short cycles."""
    return replace(kinetics_tsm(gpus=6, clips_per_gpu=16), multigrid=BOTH_CYCLES)


@register_recipe
def demo_tsm_r18_8f_multigrid_b32_e10() -> RunConfig:
    """The demo recipe with long + short cycles (BN over the base batch's 16 clips, precise BN)."""
    cfg = demo_tsm_r18_8f_b32_e12()
    # Measured at 10 epochs (the name says so) and with one test clip.
    cfg = replace(
        cfg,
        train=replace(cfg.train, epochs=10),
        data=replace(cfg.data, eval_clip=replace(cfg.data.eval_clip, num_clips=1)),
    )
    # Precise BN before each evaluation: statistics gathered at 2-4 frames and 16-23 px do not
    # fit the 8 x 32^2 clips evaluated (docs/benchmarks.md, "Multigrid on the demo").
    return replace(cfg, multigrid=replace(BOTH_CYCLES, bn_base_size=0, precise_bn_batches=8))
