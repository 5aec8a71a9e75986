import pytest

from vidscale.data.clip import ClipSpec
from vidscale.data.samplers import BatchRequest, RequestBatchSampler, RequestCycle, TrainSampler


def test_train_sampler_equal_lengths_disjoint_and_deterministic() -> None:
    samplers = [TrainSampler(11, rank=r, world_size=2, seed=5) for r in range(2)]
    for s in samplers:
        s.set_epoch(3)
    a, b = (list(s) for s in samplers)
    assert len(a) == len(b) == 5
    assert not set(a) & set(b)
    again = TrainSampler(11, rank=0, world_size=2, seed=5)
    again.set_epoch(3)
    assert list(again) == a
    again.set_epoch(4)
    assert list(again) != a


def test_train_sampler_resumes_mid_epoch() -> None:
    s = TrainSampler(20, rank=1, world_size=2, seed=0)
    s.set_epoch(2)
    full = list(s)
    s.set_epoch(2, start=4)
    assert list(s) == full[4:]
    assert len(s) == len(full) - 4


def test_request_batches_follow_their_sizes_and_specs() -> None:
    sampler = TrainSampler(20, rank=0, world_size=1, seed=0, shuffle=False)
    batches = RequestBatchSampler(sampler)
    small = ClipSpec(frames=2, crop_size=16)
    batches.set_requests([BatchRequest(4, small), BatchRequest(2), BatchRequest(8, small)])
    out = list(batches)
    assert out == [
        [(0, small), (1, small), (2, small), (3, small)],
        [4, 5],
        [(i, small) for i in range(6, 14)],
    ]
    assert len(batches) == 3


def test_request_batches_stop_early_never_short_and_resume_at_the_sampler_start() -> None:
    sampler = TrainSampler(10, rank=0, world_size=1, seed=0, shuffle=False)
    batches = RequestBatchSampler(sampler)
    batches.set_requests([BatchRequest(4)] * 4)
    assert list(batches) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the third would be short
    sampler.set_epoch(0, start=6)
    batches.set_requests([BatchRequest(2), BatchRequest(2)])
    assert list(batches) == [[6, 7], [8, 9]]
    with pytest.raises(ValueError, match=">= 1 clip"):
        batches.set_requests([BatchRequest(0)])


def test_a_request_cycle_repeats_each_entry_per_step_and_checks_its_fields() -> None:
    small = ClipSpec(frames=2, crop_size=16)
    cycle = RequestCycle((BatchRequest(4, small), BatchRequest(2)), total=7, repeat=2)
    assert [cycle[i].size for i in range(len(cycle))] == [4, 4, 2, 2, 4, 4, 2]
    assert cycle[4].spec == small and cycle.clips() == 22
    for bad in (
        {"cycle": (), "total": 1},
        {"cycle": (BatchRequest(2),), "total": -1},
        {"cycle": (BatchRequest(2),), "total": 1, "repeat": 0},
        {"cycle": (BatchRequest(0),), "total": 1},
    ):
        with pytest.raises(ValueError):
            RequestCycle(**bad)  # type: ignore[arg-type]
