"""Frame classifiers: TSN's consensus is order-blind, TSM's is not; online TSM streams exactly."""

import pytest
import torch

from vidscale.models.registry import ModelConfig, build_model
from vidscale.models.resnet import ResNet
from vidscale.models.temporal_shift import ShiftSpec
from vidscale.models.tsm import FrameClassifier, StreamingTSM


def _model(shift: ShiftSpec | None, *, seed: int = 0) -> FrameClassifier:
    """float64, so that equalities are tested well below the size of real differences."""
    torch.manual_seed(seed)
    model = FrameClassifier(ResNet(18, num_classes=5, shift=shift), dropout=0.5)
    torch.nn.init.normal_(model.trunk.fc.weight)  # a head large enough to see differences
    return model.double().eval()


def _clips(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


def test_tsn_ignores_frame_order_and_tsm_does_not() -> None:
    clips = _clips(2, 3, 4, 16, 16)
    reversed_clips = clips.flip(2)
    tsn, tsm = _model(None), _model(ShiftSpec())
    with torch.no_grad():
        assert torch.allclose(tsn(clips), tsn(reversed_clips), atol=1e-8)
        assert not torch.allclose(tsm(clips), tsm(reversed_clips), atol=1e-3)


def test_forward_is_the_mean_of_frame_logits() -> None:
    model, clips = _model(ShiftSpec()), _clips(2, 3, 4, 16, 16)
    with torch.no_grad():
        assert torch.allclose(model(clips), model.frame_logits(clips).mean(1))


def test_streaming_equals_offline_causal_model() -> None:
    torch.manual_seed(0)
    model = _model(ShiftSpec(causal=True))
    clips = _clips(2, 3, 5, 16, 16)
    stream = StreamingTSM(model).eval()
    with torch.no_grad():
        offline = model.frame_logits(clips)
        for t in range(clips.shape[2]):
            assert torch.allclose(stream(clips[:, :, t]), offline[:, t], atol=1e-8), t
        assert torch.allclose(stream.mean_logits(), model(clips), atol=1e-8)
        stream.reset()
        assert torch.allclose(stream(clips[:, :, 0]), offline[:, 0], atol=1e-8)


def test_causal_model_ignores_the_future() -> None:
    model = _model(ShiftSpec(causal=True))
    clips = _clips(1, 3, 4, 16, 16)
    changed = clips.clone()
    changed[:, :, 3] = _clips(1, 3, 16, 16)
    with torch.no_grad():
        before = model.frame_logits(clips)
        after = model.frame_logits(changed)
    assert torch.allclose(before[:, :3], after[:, :3])


def test_registered_online_model_streams() -> None:
    model = build_model(ModelConfig(name="online_tsm_resnet50", num_classes=4)).eval()
    stream = StreamingTSM(model)  # type: ignore[arg-type]
    assert stream(torch.randn(1, 3, 32, 32)).shape == (1, 4)


def test_streaming_refuses_non_causal_or_pooled_models() -> None:
    with pytest.raises(ValueError, match="causal"):
        StreamingTSM(_model(ShiftSpec()))
    pooled = build_model(ModelConfig(name="online_tsm_resnet50", temporal_pool=True))
    with pytest.raises(ValueError, match="temporal pooling"):
        StreamingTSM(pooled)  # type: ignore[arg-type]


def test_streaming_leaves_the_given_model_untouched() -> None:
    model = _model(ShiftSpec(causal=True))
    StreamingTSM(model)
    assert all(
        b.shift is None or type(b.shift).__name__ == "TemporalShift" for b in model.trunk.blocks()
    )


def test_tsm_exports() -> None:
    """torch.export (the path to ONNX) sees through the custom-gradient shift."""
    model = _model(ShiftSpec())
    clips = _clips(1, 3, 4, 16, 16)
    with torch.no_grad():
        exported = torch.export.export(model, (clips,)).module()
        assert torch.allclose(exported(clips), model(clips), atol=1e-8)
