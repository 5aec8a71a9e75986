"""Image classifiers for ImageNet training whose trunk feeds the video models.

- `ImageResNet`: ResNet-18/34/50/101 (He et al. 2016) on the shared trunk, 2D, with exactly
  torchvision's `state_dict` keys and shapes (it *is* `ResNet`, plus a parameter-free dropout),
  so its weights are the `model.pretrained` file of TSN, TSM and I3D (`torchvision_resnet`
  finds that trunk in a trained image, TSN or TSM model).
- `AlexNetBN`: the one-GPU AlexNet (Krizhevsky et al. 2012, torchvision's variant) with
  BatchNorm in place of local response normalisation: the AlexNet-BN of the LARS paper (You,
  Gitman and Ginsburg 2017, arXiv 1708.03888, §4).

An image is a one-frame clip: every model here takes clips (N, C, T, H, W), runs each frame as
an image and averages the T frames' logits (TSN's average consensus; T = 1 is the image case),
or plain images (N, C, H, W).

Shape legend:
    N   images (or clips) in the batch      T   frames per clip (1 for images)
    C   channels                            H, W  spatial size
    K   classes                             NT  N*T: frames folded into the batch
"""

from __future__ import annotations

from torch import Tensor, nn

from vidscale.models.batchnorm import set_batch_clips
from vidscale.models.resnet import ResNet


def fold_frames(x: Tensor) -> tuple[Tensor, int]:
    """(N, C, T, H, W) clips -> ((NT, C, H, W) frames, T); (N, C, H, W) images pass as T = 1."""
    if x.dim() == 4:
        return x, 1
    if x.dim() != 5:
        raise ValueError(f"expected (N, C, T, H, W) clips or (N, C, H, W) images, got {x.shape}")
    n, c, t, h, w = x.shape
    return x.transpose(1, 2).reshape(n * t, c, h, w), t


class ImageResNet(ResNet):
    """A 2D ResNet image classifier: `ResNet` (torchvision's keys, initialisation and `fc`)
    with dropout before `fc` (torchvision's has none: `dropout=0` is exactly torchvision's).

    `forward(clips (N, C, T, H, W)) -> (N, K)`: the mean over T of each frame's logits.
    `forward(images (N, C, H, W)) -> (N, K)`: per-image logits. For 4D input `num_frames` keeps
    `ResNet.forward`'s meaning (consecutive frames of one clip, grouped for sub-batch BN; the
    output stays per frame); a 5D clip carries its own T, so `num_frames` must then stay 1.

    With 1000 classes, per 224x224 image (`models.costs.model_info`: convolutions and the fc),
    ResNet-18 has 11,689,512 parameters and 1,814,073,344 MACs, ResNet-50 25,557,032 and
    4,089,184,256 (torchvision's documented 1.81 and 4.09 GFLOPS, which are MACs). The 1.82 G and
    4.11 G often quoted are these plus 2 operations (scale and shift) per BatchNorm output
    element: ResNet-50's BNs output 11,113,984 elements, 4,089,184,256 + 2 x 11,113,984 =
    4,111,412,224 (ResNet-18: 2,483,712 elements, 1,819,040,768).
    """

    def __init__(
        self,
        depth: int = 50,
        *,
        num_classes: int = 1000,
        in_channels: int = 3,
        dropout: float = 0.0,
    ) -> None:
        super().__init__(depth, num_classes=num_classes, in_channels=in_channels)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, *, num_frames: int = 1) -> Tensor:
        if x.dim() == 5 and num_frames != 1:
            raise ValueError("a clip carries its own T: pass num_frames only with 4D frames")
        x_NT_C_H_W, t = fold_frames(x)
        frames = t if x.dim() == 5 else num_frames
        features = self.forward_features(x_NT_C_H_W, num_frames=frames)
        logits_NT_K = self.fc(self.dropout(self.pool(features)))
        if x.dim() == 4:
            return logits_NT_K
        return logits_NT_K.view(-1, t, logits_NT_K.shape[-1]).mean(dim=1)


def torchvision_resnet(model: nn.Module) -> ResNet:
    """The torchvision-format 2D ResNet inside `model`: an `ImageResNet` itself, a TSN's or
    TSM's `trunk`. `ValueError` for anything else: AlexNet has no ResNet, I3D's trunk is inflated
    to 3D kernels, SlowFast's pathways do not have ResNet-50's shapes."""
    trunk = model if isinstance(model, ResNet) else getattr(model, "trunk", None)
    if not isinstance(trunk, ResNet):
        raise ValueError(f"{type(model).__name__} has no torchvision ResNet trunk")
    if trunk.temporal.layout != "frames":
        raise ValueError(
            f"{type(model).__name__}'s ResNet trunk is inflated to 3D kernels: it is not a "
            "torchvision (2D) ResNet"
        )
    return trunk


# (out channels, kernel, stride, padding, max-pool after) of conv1..conv5 (torchvision's AlexNet)
ALEXNET_CONVS = (
    (64, 11, 4, 2, True),
    (192, 5, 1, 2, True),
    (384, 3, 1, 1, False),
    (256, 3, 1, 1, False),
    (256, 3, 1, 1, True),
)
ALEXNET_HIDDEN = 4096
ALEXNET_MIN_SIZE = 63  # the smallest input side that leaves conv5's max-pool a 3x3 window


class AlexNetBN(nn.Module):
    """AlexNet-BN: `forward(clips (N, C, T, H, W) or images (N, C, H, W)) -> logits (N, K)`.

    torchvision's one-GPU AlexNet (Krizhevsky et al. 2012; conv 64-11/4, 192-5, 384-3, 256-3,
    256-3, max-pools 3/2 after conv1, conv2 and conv5, adaptive average pool to 6x6, FC
    4096-4096-K with dropout before fc6 and fc7), 224x224 input. The LARS paper's AlexNet-BN
    (You et al. 2017, §4) replaces AlexNet's local response normalisation with BatchNorm; here
    BatchNorm follows each of the five convolutions (`bn1`..`bn5`, 2D) and the two hidden FCs
    (`bn6`, `bn7`, 1D), before the ReLU, and none follows the classifier `fc` (fc8). The convs
    and FCs keep their biases as in torchvision's layers, so the parameter count is
    torchvision's 61,100,840 plus 2 per normalised channel (2 x (1,152 + 8,192) = 18,688):
    61,119,528 with 1000 classes; 714,188,480 multiply-accumulates (0.71 GMACs) per 224x224
    image. The first conv is `conv1` and the classifier `fc`, the names `models.transfer` knows.
    Frames of a clip are run as images and their logits averaged over T.
    """

    def __init__(self, *, num_classes: int = 1000, in_channels: int = 3, dropout: float = 0.5):
        super().__init__()
        cin = in_channels
        for i, (cout, k, stride, pad, _) in enumerate(ALEXNET_CONVS, start=1):
            self.add_module(f"conv{i}", nn.Conv2d(cin, cout, k, stride=stride, padding=pad))
            self.add_module(f"bn{i}", nn.BatchNorm2d(cout))
            cin = cout
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.dropout = nn.Dropout(dropout)
        self.fc6 = nn.Linear(cin * 6 * 6, ALEXNET_HIDDEN)
        self.bn6 = nn.BatchNorm1d(ALEXNET_HIDDEN)
        self.fc7 = nn.Linear(ALEXNET_HIDDEN, ALEXNET_HIDDEN)
        self.bn7 = nn.BatchNorm1d(ALEXNET_HIDDEN)
        self.fc = nn.Linear(ALEXNET_HIDDEN, num_classes)
        self.relu = nn.ReLU(inplace=True)

    def forward_features(self, x_NT_C_H_W: Tensor) -> Tensor:
        """conv1..conv5 with their BNs, ReLUs and pools, then the 6x6 average pool: (NT, 9216)."""
        x = x_NT_C_H_W
        for i, (*_, pool) in enumerate(ALEXNET_CONVS, start=1):
            x = self.relu(self.get_submodule(f"bn{i}")(self.get_submodule(f"conv{i}")(x)))
            if pool:
                x = self.maxpool(x)
        return self.avgpool(x).flatten(1)

    def forward_head(self, features: Tensor) -> Tensor:
        """fc6, fc7 (dropout before each, BN and ReLU after), then the classifier: (NT, K)."""
        x = self.relu(self.bn6(self.fc6(self.dropout(features))))
        x = self.relu(self.bn7(self.fc7(self.dropout(x))))
        return self.fc(x)

    def forward(self, x: Tensor) -> Tensor:
        x_NT_C_H_W, t = fold_frames(x)
        if min(x_NT_C_H_W.shape[-2:]) < ALEXNET_MIN_SIZE:
            raise ValueError(
                f"AlexNet needs images of at least {ALEXNET_MIN_SIZE}x{ALEXNET_MIN_SIZE}"
            )
        if self.training:
            set_batch_clips(self, x_NT_C_H_W.shape[0] // t)  # sub-batch BN splits clips
        logits_NT_K = self.forward_head(self.forward_features(x_NT_C_H_W))
        return logits_NT_K.view(-1, t, logits_NT_K.shape[-1]).mean(dim=1)

    def temporal_resolutions(self, *, frames: int) -> dict[str, int]:
        """Frames per stage (TSM paper Table 2's columns): every frame is an image until the
        average of the logits."""
        return {"data": frames, "conv1": frames, "conv5": frames, "fc": frames, "average": 1}
