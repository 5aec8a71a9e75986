from collections.abc import Callable
from typing import cast

import pytest
import torch
from torch import nn

from vidscale.fastpath import settings
from vidscale.fastpath.settings import (
    FP32,
    Candidate,
    apply_to_model,
    bf16_capped_by_environment,
    candidates,
    hardware_rule,
    requested,
    resolve_fast_path,
)

CPU = torch.device("cpu")


def test_switch_off_disables_everything() -> None:
    fast = resolve_fast_path(CPU, enabled=False, amp="bf16", channels_last="on", compile=True)
    assert (fast.bf16, fast.channels_last, fast.compile) == (False, False, False)


@pytest.mark.parametrize("has_units", [True, False], ids=["bf16-units", "avx2-only"])
def test_auto_takes_the_decision_and_explicit_choices_win(
    bf16_units: Callable[[bool], None], has_units: bool
) -> None:
    bf16_units(has_units)
    bf16_cl = Candidate(bf16=True, channels_last=True)
    for decided in (FP32, bf16_cl):
        auto = resolve_fast_path(
            CPU, enabled=True, amp="auto", channels_last="auto", compile=False, auto=decided
        )
        assert auto.candidate == decided
    off = resolve_fast_path(CPU, enabled=True, amp="off", channels_last="off", compile=False)
    assert off.candidate == FP32
    on = resolve_fast_path(
        CPU, enabled=True, amp="bf16", channels_last="on", compile=False, auto=FP32
    )
    assert on.bf16 and on.channels_last
    mixed = resolve_fast_path(
        CPU, enabled=True, amp="off", channels_last="auto", compile=False, auto=bf16_cl
    )
    assert (mixed.bf16, mixed.channels_last) == (False, True)
    # Nothing decided (a caller that does not probe): the unmeasured hardware rule.
    legacy = resolve_fast_path(CPU, enabled=True, amp="auto", channels_last="auto", compile=False)
    assert legacy.candidate == hardware_rule(CPU) == Candidate(has_units, has_units)


def test_candidates_vary_only_the_axes_left_at_auto(bf16_units: Callable[[bool], None]) -> None:
    bf16_units(True)
    both = candidates(CPU, bf16=None, channels_last=None)
    assert [c.label for c in both] == ["fp32", "fp32+cl", "bf16", "bf16+cl"]
    bf16_units(False)  # bf16 would be emulated: never a candidate
    assert [c.label for c in candidates(CPU, bf16=None, channels_last=None)] == ["fp32", "fp32+cl"]
    assert [c.label for c in candidates(CPU, bf16=True, channels_last=None)] == [
        "bf16",
        "bf16+cl",
    ]
    assert candidates(CPU, bf16=False, channels_last=True) == [Candidate(False, True)]
    assert requested(enabled=True, amp="auto", channels_last="off") == (None, False)
    assert requested(enabled=True, amp="bf16", channels_last="auto") == (True, None)
    assert requested(enabled=False, amp="auto", channels_last="auto") == (False, False)


def test_candidate_labels_round_trip() -> None:
    for c in (Candidate(b, cl) for b in (False, True) for cl in (False, True)):
        assert Candidate.from_label(c.label) == c
    with pytest.raises(ValueError, match="not a fast-path setting"):
        Candidate.from_label("fp16")


def test_bf16_autocast_and_channels_last_give_close_outputs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    x = torch.randn(2, 3, 16, 16)
    ref = model(x)
    fast = resolve_fast_path(CPU, enabled=True, amp="bf16", channels_last="on", compile=False)
    apply_to_model(model, fast)
    conv = model[0]
    assert isinstance(conv, nn.Conv2d)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    with fast.autocast()():
        out = model(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=5e-2)


@pytest.mark.slow
def test_compiled_tsm_trains_like_eager() -> None:
    # Under torch.compile the shift takes its graph-capture form (concatenations) inside the
    # custom autograd function: outputs and every gradient must match the eager step. The
    # aot_eager backend traces exactly what Inductor receives (forward and backward graphs)
    # without generating C++, which would take most of a minute here.
    from vidscale.models.registry import ModelConfig, build_model

    torch.manual_seed(0)
    cfg = ModelConfig(name="tsm_resnet18", num_classes=5, frames=2, dropout=0.0)
    fast = resolve_fast_path(CPU, enabled=True, amp="off", channels_last="on", compile=True)
    model = apply_to_model(build_model(cfg), fast)
    clips, labels = torch.randn(2, 3, 2, 32, 32), torch.tensor([1, 3])

    def step(m: nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        logits = m(clips)
        nn.functional.cross_entropy(logits, labels).backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    eager_logits, eager_grads = step(model)
    compiled_model = cast(nn.Module, torch.compile(model, backend="aot_eager"))
    compiled_logits, compiled_grads = step(compiled_model)
    torch.testing.assert_close(compiled_logits, eager_logits, rtol=1e-4, atol=1e-5)
    assert len(compiled_grads) == len(eager_grads) == len(list(model.parameters()))
    for compiled, eager in zip(compiled_grads, eager_grads, strict=True):
        assert (compiled - eager).norm() <= 1e-4 * eager.norm()


@pytest.mark.parametrize(
    ("env", "capped"),
    [
        ({}, None),
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "ONEDNN_MAX_CPU_ISA=AVX2"),
        ({"ONEDNN_MAX_CPU_ISA": "avx512_core_vnni"}, "ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI"),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, None),
        ({"ONEDNN_MAX_CPU_ISA": "ALL"}, None),
        ({"ATEN_CPU_CAPABILITY": "avx2"}, "ATEN_CPU_CAPABILITY=avx2"),
        ({"ATEN_CPU_CAPABILITY": "avx512"}, None),
    ],
)
def test_an_instruction_set_cap_hides_the_bf16_units(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], capped: str | None
) -> None:
    """How a machine with bf16 units is made to act as an AVX2-only one: the caps that keep
    torch's kernels off those units also keep bf16 out of the fast path's candidates."""
    for name in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(settings, "cpu_flags_have_bf16", lambda: True)
    settings.cpu_has_bf16_units.cache_clear()
    try:
        assert bf16_capped_by_environment() == capped
        assert settings.cpu_has_bf16_units() is (capped is None)
    finally:
        settings.cpu_has_bf16_units.cache_clear()
