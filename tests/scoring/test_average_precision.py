"""Average precision against scikit-learn, hand-worked rankings with ties, and on 2 gloo ranks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.distributed.multiproc import run_ranks
from vidscale.distributed.collectives import all_gather_object
from vidscale.distributed.env import DistEnv
from vidscale.scoring.average_precision import (
    MeanAP,
    aggregate_views,
    average_precision,
    mean_average_precision,
)


def tied_scores_and_targets(
    seed: int, n: int, k: int, *, levels: int = 5
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores on a few levels (so most of them tie) and targets with about 30% positives."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, levels, size=(n, k)) / (levels - 1)
    targets = rng.random((n, k)) < 0.3
    return torch.from_numpy(scores), torch.from_numpy(targets)


@pytest.mark.parametrize("seed", range(20))
def test_average_precision_equals_scikit_learn_with_many_ties(seed: int) -> None:
    # Imported here: collecting this module (`pytest -m cuda` on an image without scikit-learn)
    # must not need it.
    from sklearn.metrics import average_precision_score

    n = [5, 17, 64, 301][seed % 4]
    scores, targets = tied_scores_and_targets(seed, n, 1, levels=[2, 3, 5, 11][seed % 4])
    scores, targets = scores[:, 0], targets[:, 0]
    targets[seed % n] = True  # at least one positive
    expected = average_precision_score(targets.numpy(), scores.numpy())
    assert average_precision(scores, targets) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_mean_average_precision_equals_scikit_learn_over_classes_with_a_positive() -> None:
    from sklearn.metrics import average_precision_score

    scores, targets = tied_scores_and_targets(7, 50, 12)
    targets[:, [3, 8]] = False
    kept = [k for k in range(12) if k not in (3, 8)]
    per_class = average_precision_score(
        targets[:, kept].numpy(), scores[:, kept].numpy(), average=None
    )
    result = mean_average_precision(scores, targets)
    assert result.value == pytest.approx(float(np.mean(per_class)), rel=1e-12)
    np.testing.assert_allclose(result.per_class[kept].numpy(), per_class, rtol=1e-12)
    assert torch.isnan(result.per_class[[3, 8]]).all()
    assert (result.classes_scored, result.classes_without_positives) == (10, 2)


def test_ties_form_one_threshold() -> None:
    scores = torch.tensor([0.9, 0.8, 0.8, 0.5, 0.5, 0.5, 0.1])
    targets = torch.tensor([True, False, True, True, False, False, False])
    # Thresholds 0.9, 0.8, 0.5: precision 1/1, 2/3, 3/6, each adding a third of the recall.
    assert average_precision(scores, targets) == pytest.approx((1 + 2 / 3 + 1 / 2) / 3, rel=1e-15)
    # Order within a tie does not matter: put the positive of each tie last, then first.
    for order in ([0, 2, 1, 5, 4, 3, 6], [0, 1, 2, 4, 5, 3, 6]):
        assert average_precision(scores[order], targets[order]) == pytest.approx(13 / 18)
    # All scores equal: one threshold, precision = the positive rate.
    assert average_precision(torch.zeros(4), torch.tensor([0, 1, 0, 0])) == 0.25


def test_perfect_and_reversed_rankings() -> None:
    targets = torch.tensor([True, True, False, False, False])
    assert average_precision(torch.tensor([5.0, 4, 3, 2, 1]), targets) == 1.0
    # Positives ranked 4th and 5th: precision 1/4 and 2/5.
    assert average_precision(torch.tensor([1.0, 2, 3, 4, 5]), targets) == pytest.approx(
        (1 / 4 + 2 / 5) / 2
    )


def test_an_all_negative_class_is_left_out_and_counted() -> None:
    scores = torch.tensor([[0.9, 0.2, 0.7], [0.4, 0.6, 0.1], [0.4, 0.1, 0.8]])
    targets = torch.tensor([[1, 0, 0], [0, 1, 0], [1, 1, 0]])
    result = mean_average_precision(scores, targets)
    # Class 0: 0.9 (+), then the tie at 0.4 holds one + of two: precision 1 then 2/3.
    # Class 1: 0.6 (+), 0.2 (-), 0.1 (+): precision 1 then 2/3.
    assert result.per_class[0].item() == pytest.approx((1 + 2 / 3) / 2)
    assert result.per_class[1].item() == pytest.approx((1 + 2 / 3) / 2)
    assert math.isnan(result.per_class[2].item())
    assert result.value == pytest.approx(5 / 6)
    assert (result.classes_scored, result.classes_without_positives) == (2, 1)


@pytest.mark.parametrize(
    ("scores", "targets", "message"),
    [
        (torch.tensor([0.5, 0.2]), torch.tensor([False, False]), "no positive"),
        (torch.tensor([0.5, float("nan")]), torch.tensor([True, False]), "finite"),
        (torch.tensor([0.5, 0.2]), torch.tensor([2, 0]), "0/1"),
        (torch.tensor([0.5, 0.2]), torch.tensor([True, False, True]), r"\(N,\)"),
        (torch.ones(2, 2), torch.ones(2, 2), r"\(N,\)"),
    ],
)
def test_average_precision_rejects_bad_input(
    scores: torch.Tensor, targets: torch.Tensor, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        average_precision(scores, targets)


def test_mean_average_precision_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="no class has a positive"):
        mean_average_precision(torch.rand(3, 2), torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"\(N, K\)"):
        mean_average_precision(torch.rand(3, 2), torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"\(N, K\)"):
        mean_average_precision(torch.rand(3), torch.ones(3))


def test_aggregate_views_by_mean_and_max() -> None:
    views = torch.tensor([[[0.1, 0.9], [0.5, 0.3], [0.3, 0.0]]])  # 1 video, 3 views, 2 classes
    torch.testing.assert_close(aggregate_views(views, "max"), torch.tensor([[0.5, 0.9]]))
    torch.testing.assert_close(aggregate_views(views, "mean"), torch.tensor([[0.3, 0.4]]))
    # The max commutes with the sigmoid, so logits and probabilities give the same ranking.
    logits = torch.randn(4, 6, 3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(
        aggregate_views(logits.sigmoid(), "max"), aggregate_views(logits, "max").sigmoid()
    )
    with pytest.raises(ValueError, match="V >= 1"):
        aggregate_views(torch.zeros(2, 0, 3), "max")
    with pytest.raises(ValueError, match=r"\(N, V, K\)"):
        aggregate_views(torch.zeros(2, 3), "max")
    with pytest.raises(ValueError, match="unknown view aggregation"):
        aggregate_views(views, "median")  # type: ignore[arg-type]


def gathered_map(env: DistEnv, seed: int, n: int, k: int) -> MeanAP:
    """This rank's share of the videos (every other one, so the gathered order differs from the
    original), gathered from every rank and scored."""
    scores, targets = tied_scores_and_targets(seed, n, k)
    targets[:, 0] = False
    share = slice(env.rank, None, env.world_size)
    parts = all_gather_object((scores[share], targets[share]))
    return mean_average_precision(
        torch.cat([s for s, _ in parts]), torch.cat([t for _, t in parts])
    )


@pytest.mark.slow
def test_videos_split_over_two_ranks_give_one_process_map_exactly() -> None:
    seed, n, k = 3, 41, 9
    results = run_ranks(gathered_map, 2, seed, n, k)
    scores, targets = tied_scores_and_targets(seed, n, k)
    targets[:, 0] = False
    alone = mean_average_precision(scores, targets)
    for result in results:
        assert result.value == alone.value
        assert (result.classes_scored, result.classes_without_positives) == (8, 1)
        torch.testing.assert_close(
            result.per_class, alone.per_class, rtol=0, atol=0, equal_nan=True
        )
