from vidscale.data.samplers import TrainSampler


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
