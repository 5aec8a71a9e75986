"""RGB- and flow-stream recipes of the AAVG paper (Cong et al., "Accelerating deep neural network training
for action recognition on a cluster of GPUs", SC 2018) on UCF101 and HMDB51, split 1.

Model (§II): ResNet-152, one random frame per video, its last layer replaced for 101 (UCF101)
or 51 (HMDB51) classes, ImageNet-initialised. `model.pretrained` is None here, which trains from
scratch: pass a local torchvision ResNet-152 state_dict with `--set model.pretrained=PATH`. No
dropout: the paper changes only the last layer of ResNet-152, which has none.

Augmentation (§II, from Wang et al. [25]): frames scaled to 256x340 (height x width); training
takes a crop whose width and height are each one of 256, 224, 192, 168, resized to 224x224, and
a random horizontal flip; validation takes a 224x224 centre crop without scaling. Here the crop
sides are fractions of the frame's short side (`scales` = side / 256), so on a 256x340 frame
they are exactly the paper's, and on UCF101/HMDB51's own 240x320 frames they cover the same part
of the frame without an intermediate resize to 256x340: the crop is resized to 224x224 either
way, and 240x320 differs from 256x340 by 0.4% in aspect. The paper leaves open how width and
height pair; they are at most one size apart here (`max_distort` = 1), as in the TSN code of
[25]'s authors. Validation resizes the short side to 256 (240x320 -> 256x341, 256x340
unchanged) and takes the centre 224x224. A fixed (height, width) resize is therefore not needed.

Flow stream (§II, §V): the same network with a 20-channel first layer, fed 10 consecutive
optical flows (x, y) sampled at random per video, from flow prepared by `vidscale prepare
--flow` (TV-L1 is what the paper's generation of two-stream work extracts: `--flow tvl1`); the
same crops, and a flip that negates the x flow. Its ImageNet initialisation is the cross-modality
mean rule on conv1 (`--set model.pretrained=PATH`); AAVG4 (§V, Table I) is the AAVG3 flow recipe
started from the trained RGB stream: `--set model.init_from=RGB_RUN`. The two streams are
fused by `vidscale eval --two-stream RGB_RUN FLOW_RUN --clips 25`.

Evaluation (§II): 5 samples per video during training (`eval_clip.num_clips` = 5, frames evenly
spaced, predictions averaged); the final test uses 25: `vidscale eval RUN --clips 25`.

Baseline (§II): single-GPU SGD, lr 0.01 halved every 50 epochs, 500 epochs (85.04% on UCF101
RGB). The paper gives neither its batch size nor momentum and weight decay: 32 (AAVG's initial
per-learner batch), momentum 0.9 and decay 5e-4 (the two-stream ConvNets' usual values) are
assumed. It runs on one process: `optim.simulate_world_size` = 1 refuses more.

AAVG (§III-IV, Table I): 16 learners x 32 clips, Adam, replicas averaged once per epoch (K = -1,
§III-A); AAVG1 keeps the batch, AAVG2 adapts it (b1 = 1, b2 = 2, at most 576 per learner,
§III-B), AAVG3 also merges Adam's moments and the BatchNorm statistics (Alg. 2, §IV). The paper
does not state Adam's rate or decay: torch's defaults (1e-3, none) are used, constant, with the
rate kept when the batch changes (`aavg.lr_rule` = "unchanged"). 100 epochs as Fig. 2 for
UCF101; HMDB51 uses the same (the paper does not give its epochs).

`optim.simulate_world_size` = 16 keeps a global batch of 512, 1e-3 and train_size // 512 steps
per epoch (18 on UCF101 split 1, the paper's "about 18") on any process count W dividing 16.
On W = 16 each process is one of the paper's learners. On fewer, each process accumulates 16 / W
micro-batches of 32 into one local step, and W replicas are averaged: the same samples per step,
but fewer learners of larger batches than the paper's. The adaptive batch counts the recipe's
16 learners (`vidscale.train.phases.adaptive_batch`), so the cap of 576 per learner bounds the global
batch at 16 x 576 = 9,216 on any W.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from vidscale.config import DataConfig, RunConfig, TrainConfig
from vidscale.data.clip import ClipSpec, Modality
from vidscale.distributed.aavg.config import AAVGConfig
from vidscale.distributed.env import DistConfig
from vidscale.models.registry import ModelConfig
from vidscale.optim.factory import OptimConfig
from vidscale.recipes.registry import register_recipe
from vidscale.schedules.lr import CLIPS_PER_BASE_LR, LRConfig

Dataset = Literal["ucf101", "hmdb51"]
Variant = Literal[1, 2, 3]

NUM_CLASSES: dict[Dataset, int] = {"ucf101": 101, "hmdb51": 51}
FRAME_HW = (256, 340)  # §II: frames scaled to 256x340 (height x width)
CROP_SIDES = (256, 224, 192, 168)  # §II: multi-scale crop widths and heights
CROP = 224
VAL_SAMPLES = 5  # §II: samples averaged per video during training
TEST_SAMPLES = 25  # §II: samples per video at the final validation

BASELINE_LR = 0.01  # §II
BASELINE_BATCH = 32  # assumed: not given by the paper
BASELINE_HALVING_EPOCHS = 50  # §II: "reduced by a factor of 2 every 50 epochs"
BASELINE_EPOCHS = 500  # §II

LEARNERS = 16  # §III-A: P = 16
LEARNER_BATCH = 32  # §III-A: B = 32
ADAM_LR = 1e-3  # not given by the paper: Adam's default (Kingma & Ba; torch)
AAVG_EPOCHS = 100  # Fig. 2
FLOW_STACK = 10  # §II: "10 consecutive flows are randomly sampled"


def lr_per_8_clips(lr: float, *, global_batch: int) -> float:
    """The `optim.lr_per_8_clips` that resolves to the absolute rate `lr` at `global_batch`."""
    return lr * CLIPS_PER_BASE_LR / global_batch


def rgb_clips() -> tuple[ClipSpec, ClipSpec]:
    """(training, validation) clip specs of the RGB stream (§II; see the module docstring)."""
    short = FRAME_HW[0]
    train = ClipSpec(
        frames=1,
        sampling="uniform",  # one segment: a random frame of the whole video
        crop_size=CROP,
        short_side=short,
        scales=tuple(side / short for side in CROP_SIDES),
        flip=True,
    )
    val = ClipSpec(
        frames=1, crop_size=CROP, short_side=short, flip=False, num_clips=VAL_SAMPLES, num_crops=1
    )
    return train, val


def flow_clips() -> tuple[ClipSpec, ClipSpec]:
    """(training, validation) clip specs of the flow stream (§II): the RGB stream's crops and
    samples, each a stack of 10 consecutive flows (20 channels), flipped with x negated."""
    train, val = rgb_clips()
    flow = {"modality": "flow", "flow_stack": FLOW_STACK}
    return replace(train, **flow), replace(val, **flow)  # type: ignore[arg-type]


def _run(
    dataset: Dataset,
    *,
    modality: Modality = "rgb",
    batch: int,
    epochs: int,
    optim: OptimConfig,
    lr: LRConfig,
    dist: DistConfig,
    aavg: AAVGConfig | None = None,
) -> RunConfig:
    """The RGB or flow stream of §II on `dataset` (split 1) with the given training plan. The
    flow stream reads flow prepared by `vidscale prepare --flow` (`data.source=shards`)."""
    train_clip, eval_clip = rgb_clips() if modality == "rgb" else flow_clips()
    return RunConfig(
        model=ModelConfig(
            name="tsn_resnet152",
            num_classes=NUM_CLASSES[dataset],
            frames=1,
            dropout=0.0,
            pretrained=None,
            in_channels=train_clip.channels,
        ),
        data=DataConfig(
            source="videos" if modality == "rgb" else "shards",
            layout=dataset,
            split=1,
            batch_size=batch,
            workers=8,
            train_clip=train_clip,
            eval_clip=eval_clip,
        ),
        optim=optim,
        lr=lr,
        train=TrainConfig(epochs=epochs, eval_every=1, keep_checkpoints=5),
        dist=dist,
        aavg=aavg or AAVGConfig(),
    )


def sgd_baseline(dataset: Dataset, modality: Modality = "rgb") -> RunConfig:
    """The single-learner SGD baseline of §II (see the module docstring for what is assumed)."""
    return _run(
        dataset,
        modality=modality,
        batch=BASELINE_BATCH,
        epochs=BASELINE_EPOCHS,
        optim=OptimConfig(
            name="sgd",
            lr_per_8_clips=lr_per_8_clips(BASELINE_LR, global_batch=BASELINE_BATCH),
            momentum=0.9,
            weight_decay=5e-4,
            simulate_world_size=1,
        ),
        lr=LRConfig(
            schedule="step",
            warmup_epochs=0.0,
            milestones=tuple(
                range(BASELINE_HALVING_EPOCHS, BASELINE_EPOCHS, BASELINE_HALVING_EPOCHS)
            ),
            milestone_unit="epoch",
            gamma=0.5,
        ),
        dist=DistConfig(strategy="ddp"),
    )


def aavg_variant(dataset: Dataset, *, variant: Variant, modality: Modality = "rgb") -> RunConfig:
    """AAVG1/2/3 of Table I on 16 learners (§III-A, §III-B, §IV)."""
    merged = variant == 3  # Alg. 2 is what AAVG3 adds
    return _run(
        dataset,
        modality=modality,
        batch=LEARNER_BATCH,
        epochs=AAVG_EPOCHS,
        optim=OptimConfig(
            name="adam",
            lr_per_8_clips=lr_per_8_clips(ADAM_LR, global_batch=LEARNERS * LEARNER_BATCH),
            weight_decay=0.0,
            simulate_world_size=LEARNERS,
        ),
        lr=LRConfig(schedule="constant", warmup_epochs=0.0),
        dist=DistConfig(strategy="aavg"),
        aavg=AAVGConfig(
            k=-1,
            merge_optimizer_state=merged,
            merge_bn=merged,
            adaptive_batch=variant >= 2,
            eval_every=1,
            b1=1.0,
            b2=2,
            max_batch=576,
            lr_rule="unchanged",
        ),
    )


@register_recipe
def sgd_tsn_r152_ucf101_rgb_1f_b32_e500() -> RunConfig:
    """Single-GPU SGD baseline, UCF101 RGB: lr 0.01 halved every 50 epochs (paper: 85.04%)."""
    return sgd_baseline("ucf101")


@register_recipe
def sgd_tsn_r152_hmdb51_rgb_1f_b32_e500() -> RunConfig:
    """Single-GPU SGD baseline, HMDB51 RGB: lr 0.01 halved every 50 epochs (not reported)."""
    return sgd_baseline("hmdb51")


@register_recipe
def aavg1_tsn_r152_ucf101_rgb_1f_b32x16_e100() -> RunConfig:
    """AAVG1, UCF101 RGB: 16 x 32, Adam, averaged per epoch, constant batch (Table I: 81.6%)."""
    return aavg_variant("ucf101", variant=1)


@register_recipe
def aavg2_tsn_r152_ucf101_rgb_1f_b32x16_e100() -> RunConfig:
    """AAVG2, UCF101 RGB: AAVG1 with the adaptive batch, up to 576 (Table I: 83.7%)."""
    return aavg_variant("ucf101", variant=2)


@register_recipe
def aavg3_tsn_r152_ucf101_rgb_1f_b32x16_e100() -> RunConfig:
    """AAVG3, UCF101 RGB: AAVG2 with Adam moments and BN statistics merged (Table I: 85.6%)."""
    return aavg_variant("ucf101", variant=3)


@register_recipe
def aavg1_tsn_r152_hmdb51_rgb_1f_b32x16_e100() -> RunConfig:
    """AAVG1, HMDB51 RGB: 16 x 32, Adam, averaged per epoch, constant batch (not reported)."""
    return aavg_variant("hmdb51", variant=1)


@register_recipe
def aavg2_tsn_r152_hmdb51_rgb_1f_b32x16_e100() -> RunConfig:
    """AAVG2, HMDB51 RGB: AAVG1 with the adaptive batch, up to 576 (not reported)."""
    return aavg_variant("hmdb51", variant=2)


@register_recipe
def aavg3_tsn_r152_hmdb51_rgb_1f_b32x16_e100() -> RunConfig:
    """AAVG3, HMDB51 RGB: AAVG2 with Adam moments and BN statistics merged (Table I: 61.4%)."""
    return aavg_variant("hmdb51", variant=3)


@register_recipe
def sgd_tsn_r152_ucf101_flow_1f_b32_e500() -> RunConfig:
    """Single-GPU SGD baseline, UCF101 flow stream (10 stacked flows; paper: 84.5%)."""
    return sgd_baseline("ucf101", "flow")


@register_recipe
def sgd_tsn_r152_hmdb51_flow_1f_b32_e500() -> RunConfig:
    """Single-GPU SGD baseline, HMDB51 flow stream (not reported)."""
    return sgd_baseline("hmdb51", "flow")


@register_recipe
def aavg3_tsn_r152_ucf101_flow_1f_b32x16_e100() -> RunConfig:
    """AAVG3, UCF101 flow stream (Table I: 84.7%; with `model.init_from=RGB_RUN`, AAVG4:
    84.7%, two-stream 93.04%)."""
    return aavg_variant("ucf101", variant=3, modality="flow")


@register_recipe
def aavg3_tsn_r152_hmdb51_flow_1f_b32x16_e100() -> RunConfig:
    """AAVG3, HMDB51 flow stream (Table I: 55.9%; from the RGB run, AAVG4: 56.0%, two-stream
    67.9%)."""
    return aavg_variant("hmdb51", variant=3, modality="flow")
