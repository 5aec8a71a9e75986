"""ImageNet-1k recipes: large-batch SGD (Goyal et al.) and LARS (You et al.), plus image demos.

The system is You, Zhang, Hsieh, Demmel, Keutzer, "ImageNet Training in Minutes" (arXiv
1709.05011; its abstract: "100-epoch ImageNet training with AlexNet in 24 minutes" on 512 KNL
chips, "90-epoch ImageNet training with ResNet-50 in one hour", batch 32K with LARS), the
optimizer LARS (You, Gitman, Ginsburg, arXiv 1708.03888) and the SGD baseline Goyal et al.,
"Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" (arXiv 1706.02677).

Every ImageNet recipe: `data.layout=imagenet` (raw `train/<wnid>/*.JPEG`, or `vidscale prepare
--layout imagenet` shards with `--set data.source=shards`), 1000 classes, one frame; training
crop `random_resized` (Szegedy et al. 2015 §6: 8%-100% of the area, aspect 3/4-4/3) to 224 with
horizontal flips, evaluation short side 256 then the 224 centre crop (both as Goyal et al. §5.1
and torchvision's reference). `optim.simulate_world_size` is the paper's device count, so a
recipe keeps its global batch on fewer processes by gradient accumulation; `data.batch_size` is
the paper's per-device batch, which is also the BatchNorm batch. Weight decay: vidscale's
parameter groups (`optim.param_groups`) never decay parameters with ndim <= 1, i.e. BN's gamma
and beta and every bias. Goyal et al. (§5.1) exclude BN's gamma and beta; their ResNet-50's one
bias (the classifier's) is the difference. LARS also leaves these parameters unadapted (plain
momentum SGD at the global rate), as the LARS authors' PyTorch reproduction does
(NUS-HPC-AI-Lab/LARS-ImageNet-PyTorch, `create_optimizer_lars(bn_bias_separately=True)`).

SGD, Goyal et al. §2 and §5.1: lr = 0.1 x B/256 (linear scaling), momentum 0.9, weight decay
1e-4, 90 epochs, /10 at epochs 30, 60 and 80; for B > 256 a 5-epoch gradual warmup from 0.1
(the B = 256 rate) to the peak. The B = 256 reference is their 8-GPU x 32 baseline (no warmup).

LARS: trust coefficient eta = 0.001 (the LARS paper's eta; the default of TensorFlow's and the
authors' PyTorch LARS), momentum 0.9, and the polynomial decay (1 - t/T)^2 of LARS's Algorithm 1 (`lr.schedule=poly`, power 2) after a linear
warmup from 0. The peak rate and the warmup length come from the LARS authors' PyTorch
reproduction (ResNet-50, 90 epochs, weight decay 1e-4): its table gives lr = sqrt(B / 32) (4 at
512, 16 at 8K: `batch_scaling.sqrt_scaled_lr(B, base_lr=1, base_batch=32)`) and 10 x B / 32768
warmup epochs (2.5 at 8K). The table stops at 8K; at 32K the same two rules give lr 32 and 10
warmup epochs, which is this module's extrapolation, not a value read from the LARS paper (its
tables are not reproduced here): override with `--set optim.lr_per_8_clips=...` (peak x 8 / B)
and `--set lr.warmup_epochs=...`. AlexNet-BN uses the same rules (this module's choice) with
AlexNet's weight decay 5e-4 and dropout 0.5 (Krizhevsky et al. 2012, §5 and §4.2), 100 epochs
(the abstract). The 512 devices are the abstract's KNL chips (its AlexNet run; the ResNet-50 hour
used the same 512-chip system, arXiv 1709.05011 v1), 64 images each.

Demo recipes train ResNet-18 on `vidscale synth --images` (`data.layout=imagefolder`, 32-pixel
images of 10 pattern x scale classes that look the same mirrored, so flips keep the label) at
global batch B0 = 64 = 2 processes x
32, or 1 x 32 x 2 accumulated; a batch study reaches 16 B0 and 64 B0 with `--set
optim.simulate_world_size=32` or `128` (or `vidscale study batch-size`), with the peak rate of
`schedules.batch_scaling`: SGD linear, 0.05 x B / 64 (He et al. 2016 §4.2's 0.1 per 128 images),
LARS square root, 8 x sqrt(B / 32) (11.3 at B0). Both use the same 1-epoch warmup from 0 and
poly(2) decay, so the optimizer is the only difference. The default set (2,560 training images)
gives 40 steps per epoch at B0 and 2 at 16 B0; 64 B0 = 4,096 needs a larger one, e.g. `vidscale
synth --images --train-per-class 2048` (5 steps per epoch at 64 B0).
"""

from __future__ import annotations

from vidscale.config import DataConfig, RunConfig, TrainConfig
from vidscale.data.clip import ClipSpec
from vidscale.models.registry import IMAGENET_CLASSES, ModelConfig
from vidscale.optim.factory import OptimConfig
from vidscale.recipes.registry import register_recipe
from vidscale.schedules.batch_scaling import batch_scaled_lr, sqrt_scaled_lr
from vidscale.schedules.lr import CLIPS_PER_BASE_LR, LRConfig

IMAGENET_TRAIN_IMAGES = 1_281_167  # ILSVRC-2012 training split
GOYAL_LR_PER_256 = 0.1  # Goyal et al. §2.1: 0.1 x B / 256
GOYAL_MILESTONES = (30, 60, 80)  # Goyal et al. §5.1, epochs
LARS_ETA = 1e-3  # LARS paper's trust coefficient
LARS_DEVICES = 512  # "ImageNet Training in Minutes": 512 KNL chips
DEMO_SIZE = 32  # `vidscale synth --images` side
DEMO_BATCH = 64  # B0
DEMO_SGD_LR = 0.05  # at B0: He et al. 2016 §4.2's 0.1 per 128 images, scaled linearly


def lr_per_8(peak: float, global_batch: int) -> float:
    """The `optim.lr_per_8_clips` that the linear rule of `schedules.lr` turns into `peak`."""
    return peak * CLIPS_PER_BASE_LR / global_batch


def lars_peak(global_batch: int) -> float:
    """The LARS reproduction's square-root rule: sqrt(B / 32) (4 at 512, 16 at 8K, 32 at 32K)."""
    return sqrt_scaled_lr(global_batch, base_lr=1.0, base_batch=32)


def lars_warmup_epochs(global_batch: int) -> float:
    """The LARS reproduction's warmup: 10 x B / 32768 epochs (2.5 at 8K, 10 at 32K)."""
    return 10.0 * global_batch / 32_768


def imagenet(
    model: str,
    *,
    devices: int,
    per_device: int,
    epochs: int,
    optim: OptimConfig,
    lr: LRConfig,
    dropout: float = 0.0,
) -> RunConfig:
    """A `devices` x `per_device` ImageNet run of `model` (see the module docstring)."""
    return RunConfig(
        model=ModelConfig(name=model, num_classes=IMAGENET_CLASSES, frames=1, dropout=dropout),
        data=DataConfig(
            layout="imagenet",
            batch_size=per_device,
            workers=8,
            train_clip=ClipSpec(frames=1, crop="random_resized", crop_size=224, short_side=256),
            eval_clip=ClipSpec(frames=1, crop_size=224, short_side=256, flip=False),
        ),
        optim=optim,
        lr=lr,
        train=TrainConfig(epochs=epochs, keep_checkpoints=5),
    )


def goyal_sgd(*, gpus: int, per_gpu: int = 32) -> RunConfig:
    """Goyal et al.'s ResNet-50: `gpus` x 32 images, 0.1 x B / 256, 5 warmup epochs if B > 256."""
    batch = gpus * per_gpu
    optim = OptimConfig(
        name="sgd",
        lr_per_8_clips=lr_per_8(GOYAL_LR_PER_256 * batch / 256, batch),
        momentum=0.9,
        weight_decay=1e-4,
        simulate_world_size=gpus,
    )
    lr = LRConfig(
        schedule="step",
        milestones=GOYAL_MILESTONES,
        warmup_epochs=5.0 if batch > 256 else 0.0,
        warmup_start_factor=256 / batch,  # from the B = 256 rate, 0.1
    )
    return imagenet("resnet50", devices=gpus, per_device=per_gpu, epochs=90, optim=optim, lr=lr)


def lars(model: str, *, epochs: int, weight_decay: float, dropout: float = 0.0) -> RunConfig:
    """LARS at 32K = 512 devices x 64: peak sqrt(B / 32), poly(2), eta 0.001 (module docstring)."""
    per_device = 64
    batch = LARS_DEVICES * per_device
    optim = OptimConfig(
        name="lars",
        lr_per_8_clips=lr_per_8(lars_peak(batch), batch),
        momentum=0.9,
        weight_decay=weight_decay,
        eta=LARS_ETA,
        simulate_world_size=LARS_DEVICES,
    )
    lr = LRConfig(
        schedule="poly",
        power=2.0,
        warmup_epochs=lars_warmup_epochs(batch),
        warmup_start_factor=0.0,
    )
    return imagenet(
        model,
        devices=LARS_DEVICES,
        per_device=per_device,
        epochs=epochs,
        optim=optim,
        lr=lr,
        dropout=dropout,
    )


@register_recipe
def resnet50_imagenet_b256_e90_sgd() -> RunConfig:
    """Goyal et al.'s baseline: 8 GPUs x 32 = 256, lr 0.1, /10 at 30/60/80 (23.60% top-1 err)."""
    return goyal_sgd(gpus=8)


@register_recipe
def resnet50_imagenet_b8k_e90_sgd() -> RunConfig:
    """Goyal et al.: 256 GPUs x 32 = 8K, lr 3.2 after 5 warmup epochs (23.74% top-1 error)."""
    return goyal_sgd(gpus=256)


@register_recipe
def resnet50_imagenet_b32k_e90_lars() -> RunConfig:
    """LARS ResNet-50 at 32K (512 x 64), 90 epochs: peak 32, 10 warmup epochs, poly(2)."""
    return lars("resnet50", epochs=90, weight_decay=1e-4)


@register_recipe
def alexnet_bn_imagenet_b32k_e100_lars() -> RunConfig:
    """LARS AlexNet-BN at 32K (512 x 64), 100 epochs ("in 24 minutes"): peak 32, poly(2)."""
    return lars("alexnet_bn", epochs=100, weight_decay=5e-4, dropout=0.5)


def demo_images(optimizer: str) -> RunConfig:
    """ResNet-18 on the 32-pixel demo images at B0 = 64 (module docstring for the rules)."""
    rule = batch_scaled_lr(
        optimizer, DEMO_BATCH, recipe_lr_per_8_clips=lr_per_8(DEMO_SGD_LR, DEMO_BATCH)
    )
    # From scratch at 32 px: a box of 8% of the area (9 px) would keep little of the object (its
    # radius is 0.26-0.38 of the side), so the area range starts at 50% (this recipe's choice);
    # the aspect range is Szegedy et al.'s.
    train_clip = ClipSpec(
        frames=1,
        crop="random_resized",
        crop_size=DEMO_SIZE,
        short_side=DEMO_SIZE,
        area=(0.5, 1.0),
    )
    return RunConfig(
        model=ModelConfig(name="resnet18", num_classes=0, frames=1, dropout=0.0),
        data=DataConfig(
            layout="imagefolder",
            batch_size=32,
            workers=1,
            train_clip=train_clip,
            eval_clip=ClipSpec(frames=1, crop_size=DEMO_SIZE, short_side=DEMO_SIZE, flip=False),
        ),
        optim=OptimConfig(
            name="sgd" if optimizer == "sgd" else "lars",
            lr_per_8_clips=rule.lr_per_8_clips,
            momentum=0.9,
            weight_decay=1e-4,
            eta=LARS_ETA,
            simulate_world_size=2,
        ),
        lr=LRConfig(schedule="poly", power=2.0, warmup_epochs=1.0, warmup_start_factor=0.0),
        train=TrainConfig(epochs=10, log_every=10, keep_checkpoints=3),
    )


@register_recipe
def demo_resnet18_images_b64_e10_sgd() -> RunConfig:
    """ResNet-18 on the demo images, B0 = 64, 10 epochs, SGD 0.05 (linear rule), poly(2)."""
    return demo_images("sgd")


@register_recipe
def demo_resnet18_images_b64_e10_lars() -> RunConfig:
    """The same with LARS at 8 x sqrt(64 / 32) = 11.3 (`schedules.batch_scaling`'s rule)."""
    return demo_images("lars")
