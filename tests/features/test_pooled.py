"""The pooled feature is exactly what the classifier reads, for every model family: with the
classifier put back on top of the extracted feature, the model's own logits come out."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from vidscale.errors import InputError
from vidscale.features.pooled import as_feature_extractor, classifier_name
from vidscale.models.registry import ModelConfig, build_model

CLASSES = 5

# (model, clip shape (C, T, H, W), classifier): a 2D frame model of each kind, I3D, SlowFast,
# an image ResNet (a clip of frames is averaged as TSN's consensus).
FAMILIES = [
    ("tsm_resnet18", (3, 4, 32, 32), "trunk.fc"),
    ("tsn_resnet18", (3, 4, 32, 32), "trunk.fc"),
    ("i3d_resnet50_3x1x1", (3, 8, 32, 32), "trunk.fc"),
    ("slowfast_resnet50_4x16", (3, 8, 32, 32), "fc"),
    ("resnet18", (3, 2, 32, 32), "fc"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "shape", "classifier"), FAMILIES)
def test_feature_is_the_classifier_input(
    name: str, shape: tuple[int, ...], classifier: str
) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, num_classes=CLASSES, frames=shape[1])).eval()
    assert classifier_name(model, CLASSES) == classifier
    fc = copy.deepcopy(model.get_submodule(classifier))
    assert isinstance(fc, nn.Linear)
    clips = torch.randn(2, *shape)
    with torch.no_grad():
        logits = model(clips)
        dim = as_feature_extractor(model, CLASSES)
        features = model(clips)
        again = fc(features)
    assert features.shape == (2, dim) == (2, fc.in_features)
    torch.testing.assert_close(again, logits, rtol=1e-4, atol=1e-5)


def test_a_model_without_one_classifier_is_refused() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 3))
    with pytest.raises(InputError, match="cannot tell its classifier"):
        classifier_name(model, 3)
