"""Recipes for the built-in demo dataset (`vidscale synth`): minutes on a 2-core CPU.

The demo's classes differ only in temporal order (left vs right, ...), so TSM must reach high
accuracy while TSN, an order-blind frame average, stays at chance: the project's small-scale
check that temporal modelling works. Frames are 32x32, so models train from scratch; horizontal
flips are off because they would swap the left/right labels. The flow recipes read optical flow
prepared with `vidscale prepare --layout generic --root DEMO --out PREP --flow dis`.

The multi-label recipes read the multi-label demo (`vidscale synth --multi-label`: 48x48 videos
of three objects, 2-3 of 6 classes each, `multilabel` layout): the demo recipe on label sets,
where TSM can recover every label and TSN scores each class at about its positive rate, with
three changes, and with the first demo's dropout 0.2 and 2 warmup epochs, which it was measured
with. Training crops are the whole frame, since each object fills a quadrant to its
edges and a corner crop would cut one off; the LR is 4x the demo's, since binary cross-entropy
averaged over the classes gives each logit a smaller gradient than the softmax's; and 10 epochs
of its 2048 videos, where 20 of 768 over-fitted (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import replace

from vidscale.config import DataConfig, RunConfig, TrainConfig
from vidscale.data.clip import ClipSpec, Modality
from vidscale.data.synthetic.multilabel import DEFAULT_SIZE as MULTI_LABEL_SIZE
from vidscale.models.registry import ModelConfig
from vidscale.optim.factory import OptimConfig
from vidscale.recipes.registry import register_recipe
from vidscale.schedules.lr import LRConfig

DEMO_SIZE = 32
# The demo's 16-frame videos have 15 flows: 8 segments of L = 2 cover them once (the papers' L = 10
# would make every segment's stack overlap its neighbours').
DEMO_FLOW_STACK = 2


def _demo(
    model: str,
    modality: Modality = "rgb",
    *,
    size: int = DEMO_SIZE,
    epochs: int = 10,
    eval_clips: int = 1,
) -> RunConfig:
    stack = DEMO_FLOW_STACK if modality == "flow" else 1
    train_clip = ClipSpec(
        frames=8,
        sampling="uniform",
        crop_size=size,
        short_side=size,
        scales=(1.0, 0.875, 0.75),
        flip=False,
        modality=modality,
        flow_stack=stack,
    )
    eval_clip = ClipSpec(
        frames=8,
        crop_size=size,
        short_side=size,
        flip=False,
        modality=modality,
        flow_stack=stack,
        num_clips=eval_clips,
    )
    return RunConfig(
        # No dropout: on the 1,536 training videos the training loss stays at the validation
        # loss (no over-fitting for dropout to curb), and 0.2 cost TSM 2 points on seed 1
        # (docs/benchmarks.md, "The demo's recipe: 1,536 videos for 10 epochs").
        model=ModelConfig(
            name=model, num_classes=0, frames=8, dropout=0.0, in_channels=train_clip.channels
        ),
        data=DataConfig(
            source="videos" if modality == "rgb" else "shards",
            batch_size=16,
            workers=1,
            train_clip=train_clip,
            eval_clip=eval_clip,
        ),
        # From scratch at a small batch: a larger LR per 8 clips than the paper's fine-tuning.
        # Global batch 32 on any process count: 2 processes x 16, or 1 x 16 x 2 accumulated.
        optim=OptimConfig(
            name="sgd",
            lr_per_8_clips=0.0125,
            momentum=0.9,
            weight_decay=1e-4,
            simulate_world_size=2,
        ),
        # 1,536 videos: 10 epochs are the steps of the first demo's 20 of 768, on twice the
        # distinct videos; the RGB demo takes 12, since slow seeds were still learning at 10
        # (docs/benchmarks.md, "The demo at 12 epochs"); warmup = 48 steps.
        lr=LRConfig(schedule="cosine", warmup_epochs=1.0),
        train=TrainConfig(epochs=epochs, log_every=10, keep_checkpoints=3),
    )


# Two test clips: 8 segment centres of 16 frames see every other frame; the second clip takes each
# segment's other frame, so together they see all 16 (the TSM code's `--twice_sample`). On the
# same checkpoints of seeds 0-4 on both CPU kinds this raised the final top-1 from 91.7-97.9% to
# 94.8-98.4% (docs/benchmarks.md, "The demo with two test clips"); training is unchanged.
DEMO_EVAL_CLIPS = 2


@register_recipe
def demo_tsm_r18_8f_b32_e12() -> RunConfig:
    """TSM-ResNet-18, 8 frames, global batch 32, 12 epochs, 2 test clips: the demo."""
    return _demo("tsm_resnet18", epochs=12, eval_clips=DEMO_EVAL_CLIPS)


@register_recipe
def demo_tsn_r18_8f_b32_e12() -> RunConfig:
    """The same recipe with TSN (no temporal shift): must stay near chance on the demo."""
    return _demo("tsn_resnet18", epochs=12, eval_clips=DEMO_EVAL_CLIPS)


@register_recipe
def demo_tsm_r18_flow_8f_b32_e10() -> RunConfig:
    """The demo's flow stream: TSM-ResNet-18 on 8 segments of 2 stacked flows (4 channels) from
    `vidscale prepare --flow dis` (`--data PREP`), the demo recipe otherwise; from another run's
    weights with `--set model.init_from=RGB_RUN` (cross-modality transfer)."""
    return _demo("tsm_resnet18", "flow")


@register_recipe
def demo_tsn_r18_flow_8f_b32_e10() -> RunConfig:
    """The demo's flow stream with TSN: the flow itself carries each segment's direction of
    motion, so even an order-blind average of segments can tell the moving and growing classes
    apart. Brightening and darkening move nothing, and optical flow assumes constant brightness:
    those two classes are the RGB stream's to tell."""
    return _demo("tsn_resnet18", "flow")


def _demo_multi_label(name: str) -> RunConfig:
    cfg = _demo(name, size=MULTI_LABEL_SIZE)
    data = replace(
        cfg.data,
        layout="multilabel",
        multi_label=True,
        train_clip=replace(cfg.data.train_clip, scales=(1.0,)),
    )
    optim = replace(cfg.optim, lr_per_8_clips=4 * cfg.optim.lr_per_8_clips)
    # The settings the multi-label demo was measured with (the first demo's): dropout 0.2 and 2
    # warmup epochs.
    model = replace(cfg.model, dropout=0.2)
    lr = replace(cfg.lr, warmup_epochs=2.0)
    return replace(cfg, model=model, data=data, optim=optim, lr=lr)


@register_recipe
def demo_tsm_r18_multilabel_8f_b32_e10() -> RunConfig:
    """The demo recipe on the multi-label demo (48x48, 2-3 of 6 classes a video, mAP)."""
    return _demo_multi_label("tsm_resnet18")


@register_recipe
def demo_tsn_r18_multilabel_8f_b32_e10() -> RunConfig:
    """The multi-label demo with TSN: each class's AP should stay near its positive rate."""
    return _demo_multi_label("tsn_resnet18")
