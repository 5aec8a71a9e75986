"""`bench.cluster.standin`: the real model's parameters, backward releasing each layer's
gradients when its share of the measured time has passed, in reverse forward order, and the
wait costing (almost) no CPU."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.nn.functional as F

from vidscale.bench.cluster.calibrate import own_work_s
from vidscale.bench.cluster.config import ClipShape
from vidscale.bench.cluster.standin import Clock, ComputeProfile, StandInModel, StandInSGD
from vidscale.models.costs import model_costs
from vidscale.models.registry import ModelConfig, build_model

MODEL = "tsm_resnet18"


def standin(profile: ComputeProfile) -> tuple[StandInModel, torch.nn.Module]:
    real = build_model(ModelConfig(name=MODEL, num_classes=10, frames=2, dropout=0.0))
    costs = model_costs(MODEL, frames=2, size=32, num_classes=10)
    model = StandInModel(real, costs, profile, num_classes=10, clock=Clock(shared_core=False))
    return model, real


def test_a_step_takes_the_profile_s_time_its_gradients_arrive_in_backward_order() -> None:
    profile = ComputeProfile.from_step(0.6, tail_s=0.06, backward_fraction=2 / 3)
    assert abs(profile.forward_s - 0.18) < 1e-9 and abs(profile.backward_s - 0.36) < 1e-9
    model, real = standin(profile)
    assert [n for n, _ in model.named_parameters()] == [
        f"model.{n}" for n, _ in real.named_parameters()
    ]
    arrived: dict[str, float] = {}

    def note(name: str) -> None:
        arrived.setdefault(name, time.perf_counter())

    for name, param in real.named_parameters():
        param.register_post_accumulate_grad_hook(lambda p, name=name: note(name))
    optimizer = StandInSGD(model.parameters(), step_s=profile.tail_s, clock=model.clock, lr=0.1)
    optimizer.step()  # the real first step (no gradients yet: nothing moves)
    cpu, start = time.process_time(), time.perf_counter()
    logits = model(torch.zeros(3, 1))
    forward_end = time.perf_counter()
    F.cross_entropy(logits, torch.zeros(3, dtype=torch.long)).backward()
    backward_end = time.perf_counter()
    optimizer.step()
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    assert logits.shape == (3, 10)
    # At least the profile's times (the waits), and not many times more: the zeroed gradients
    # cost a little CPU, which a machine loaded by other work can make late, never early.
    assert 0.95 * profile.forward_s < forward_end - start < 2 * profile.forward_s + 0.2
    assert 0.95 * profile.backward_s < backward_end - forward_end < 2 * profile.backward_s + 0.2
    assert 0.95 * profile.step_s < wall < 2 * profile.step_s + 0.3, wall
    assert used < 0.5 * wall, (used, wall)  # waiting, not computing
    # Every parameter got a gradient, the classifier's first and the stem's last, each about
    # when its layer's share of backward had passed.
    names = [n for n, _ in real.named_parameters()]
    assert set(arrived) == set(names)
    assert arrived[names[-1]] < arrived[names[0]]
    assert arrived[names[0]] - forward_end > 0.9 * profile.backward_s
    assert arrived[names[-1]] - forward_end < 0.5 * profile.backward_s


def test_the_optimizer_s_first_step_is_real_later_ones_only_wait() -> None:
    model, real = standin(ComputeProfile(0.0, 0.0, 0.0))
    optimizer = StandInSGD(model.parameters(), step_s=0.0, clock=model.clock, lr=0.1, momentum=0.9)
    weight = next(real.parameters())
    weight.grad = torch.ones_like(weight)
    before = weight.detach().clone()
    optimizer.step()
    assert not torch.equal(before, weight)  # real: moved, and the momentum buffer exists
    assert "momentum_buffer" in optimizer.state[weight]
    moved = weight.detach().clone()
    optimizer.step()
    assert torch.equal(moved, weight)


def test_less_shortens_every_wait_in_proportion_and_never_below_zero() -> None:
    profile = ComputeProfile.from_step(0.6, tail_s=0.06, backward_fraction=2 / 3)
    shorter = profile.less(0.15)
    assert shorter.step_s == pytest.approx(0.45)
    assert shorter.backward_s / shorter.forward_s == pytest.approx(2.0)
    assert shorter.tail_s / shorter.step_s == pytest.approx(0.1)
    assert profile.less(1.0).step_s == 0.0


def test_the_own_work_is_the_cpu_of_a_step_without_waits_and_comes_off_the_waits() -> None:
    shape = ClipShape(batch=2, frames=2, size=32, num_classes=10)
    own = own_work_s(MODEL, shape, reps=3)
    # Real work (the gradients filled, their norm, autograd's chain): some CPU, far less than
    # a step of the model it stands for.
    assert 0.0 < own < 0.5, own
    profile = ComputeProfile.from_step(0.6, tail_s=0.06, backward_fraction=2 / 3).less(own)
    assert profile.step_s + own == pytest.approx(0.6)


def test_a_shared_core_wait_is_stretched_by_what_the_other_threads_took() -> None:
    """One core per node: gloo's CPU time delays the computation, so a wait owes it back."""

    def burn(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    clock = Clock(shared_core=True)
    other = threading.Thread(target=burn, args=(0.1,))
    other.start()
    clock.wait(0.05)  # the burner's 0.1 s of CPU falls (mostly) within the wait and its stretch
    other.join()
    assert 0.05 < clock.stretched_s < 0.15, clock.stretched_s
    alone = Clock(shared_core=False)
    alone.wait(0.02)
    assert alone.stretched_s == 0.0
