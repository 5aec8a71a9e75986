"""The one benchmark subject: the same weights and batch wherever it is built, the setting
applied as training applies it, the trainer's step, every step's update counted."""

from __future__ import annotations

import functools

import torch

from vidscale.bench.compute.train_step import StepShape, train_subject
from vidscale.fastpath.settings import Candidate
from vidscale.fastpath.subject import ProbeShape, Subject
from vidscale.models.registry import ModelConfig, build_model

CPU = torch.device("cpu")
SHAPE = ProbeShape(batch=2, channels=3, frames=2, crop=16, num_classes=4)
BUILD = functools.partial(build_model, ModelConfig(name="tsm_resnet18", num_classes=4, frames=2))


def test_every_subject_of_a_model_starts_from_the_same_weights_and_batch() -> None:
    torch.manual_seed(123)  # whatever the caller's stream, the subject is the same
    plain = Subject.build(BUILD, setting=Candidate(False, False), shape=SHAPE, device=CPU)
    layout = Subject.build(BUILD, setting=Candidate(True, True), shape=SHAPE, device=CPU)
    bench = train_subject(  # what `bench throughput`, `profile` and `shard-train` build
        StepShape("tsm_resnet18", 2, size=16, frames=2, num_classes=4),
        device=CPU,
        setting=Candidate(False, False),
    )
    for other in (layout, bench):
        assert torch.equal(plain.clips, other.clips) and torch.equal(plain.labels, other.labels)
        for a, b in zip(plain.model.parameters(), other.model.parameters(), strict=True):
            assert torch.equal(a, b)
    conv = dict(layout.model.named_parameters())["trunk.conv1.weight"]
    assert conv.is_contiguous(memory_format=torch.channels_last)  # the setting, as trained


def test_a_step_trains_and_is_counted_and_a_skipped_one_is_named() -> None:
    subject = Subject.build(BUILD, setting=Candidate(False, False), shape=SHAPE, device=CPU)
    before = [p.detach().clone() for p in subject.model.parameters()]
    assert subject().applied
    after = subject.model.parameters()
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    skipped = subject.on(subject.clips * float("nan"), subject.labels)
    assert not skipped.applied and skipped.nonfinite == "the loss"
    assert (subject.applied.measured, subject.applied.applied) == (2, 1)
    logits = subject.infer()
    assert logits.shape == (2, 4) and subject.model.training  # back in training mode
