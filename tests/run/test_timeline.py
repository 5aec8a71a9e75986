"""Plans as phases: the one-phase case is today's run; steps, offsets and requests per phase."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vidscale.config import ConfigError, apply_overrides, resolve
from vidscale.data.clip import ClipSpec
from vidscale.data.samplers import BatchRequest
from vidscale.recipes import get_recipe
from vidscale.run.timeline import Phase, Shape, make_timeline, run_sizes, steps_in_epoch
from vidscale.schedules.lr import lr_at

DEMO = "demo_tsm_r18_8f_b32_e12"


def test_a_plain_run_is_one_phase_with_the_run_sizes_and_lr() -> None:
    cfg = apply_overrides(get_recipe(DEMO), ["train.epochs=20"])
    sizes = run_sizes(cfg, world_size=2, train_size=768)
    timeline = make_timeline(cfg, sizes)
    (phase,) = timeline.phases
    assert phase.shapes == (Shape(8, 32, 16),)
    assert (phase.steps_per_epoch, phase.accumulate, phase.global_batch) == (24, 1, 32)
    assert timeline.epochs == 20 and timeline.total_steps == sizes.total_steps == 480
    for epoch, step in [(0, 0), (1, 7), (10, 23), (19, 23)]:
        expected = lr_at(
            epoch * 24 + step,
            base_lr=sizes.base_lr,
            total_steps=480,
            warmup_steps=sizes.warmup_steps,
            cfg=cfg.lr,
            steps_per_epoch=24,
        )
        assert timeline.lr(epoch=epoch, step_in_epoch=step) == expected
    # A plain run's batches request the dataset's own spec: read exactly as before.
    requests = phase.requests(22, cfg.data.train_clip)
    assert requests == [BatchRequest(16), BatchRequest(16)]
    assert [timeline.evaluates_after(e, every=5) for e in (4, 5, 19, 20)] == [
        False,
        True,
        False,
        True,
    ]


def test_accumulated_steps_request_every_micro_batch() -> None:
    cfg = get_recipe(DEMO)
    timeline = make_timeline(cfg, run_sizes(cfg, world_size=1, train_size=768))
    (phase,) = timeline.phases
    assert phase.accumulate == 2 and phase.steps_per_epoch == 24
    assert len(phase.requests(0, cfg.data.train_clip)) == 48
    assert phase.clips_before(5) == 5 * 32


def test_a_short_cycle_phase_cycles_shapes_offsets_and_specs() -> None:
    base = ClipSpec(frames=8, crop_size=32, sampling="dense", stride=2)
    shapes = (Shape(8, 16, 8), Shape(8, 23, 4), Shape(8, 32, 2))
    phase = Phase(
        first_epoch=0,
        epochs=3,
        first_step=0,
        steps_per_epoch=steps_in_epoch(40, shapes, 1),
        shapes=shapes,
        accumulate=1,
        global_batch=4,
        max_stride=4,
    )
    # 8 + 4 + 2 = 14 clips per cycle: two cycles (28) + 8 + 4 = 40 -> 2 x 3 + 2 steps.
    assert phase.steps_per_epoch == 8
    assert [phase.shape_at(i).crop for i in range(4)] == [16, 23, 32, 16]
    assert [phase.clips_before(i) for i in (0, 1, 2, 3, 4, 8)] == [0, 8, 12, 14, 22, 40]
    requests = phase.requests(6, base)
    assert [r.size for r in requests] == [8, 4]
    assert requests[0].spec == replace(base, crop_size=16, max_stride=4)
    # Even the base shape is requested with its own spec when the stride is drawn.
    assert phase.requests(2, base)[0].spec == replace(base, max_stride=4)
    # The compact form a streamed dataset receives holds the same requests, accumulated too.
    for accumulate in (1, 3):
        accumulated = replace(phase, accumulate=accumulate)
        cycle = accumulated.request_cycle(base)
        assert [cycle[i] for i in range(len(cycle))] == accumulated.requests(0, base)
        assert cycle.clips() == accumulated.clips_before(accumulated.steps_per_epoch)


def test_steps_in_epoch_equals_the_plain_rule() -> None:
    for n in range(1, 100):
        assert steps_in_epoch(n, (Shape(8, 32, 4),), 3) == n // 12


def test_timeline_phase_at_finds_each_epochs_phase() -> None:
    cfg = apply_overrides(get_recipe(DEMO), [])
    timeline = make_timeline(cfg, run_sizes(cfg, world_size=2, train_size=768))
    assert timeline.phase_at(0) is timeline.phases[0] is timeline.phase_at(25)


K400 = "slowfast_r50_k400_8x8_multigrid_b64_e239"


def test_the_k400_multigrid_recipe_gives_pyslowfasts_stages_on_any_process_count() -> None:
    cfg = get_recipe(K400)
    for world_size in (1, 2, 8):
        sizes = run_sizes(cfg, world_size=world_size, train_size=240_000)
        timeline = make_timeline(cfg, sizes)
        assert timeline.epochs == 358
        first = timeline.phases[0]
        # 8 "devices" (processes x accumulation) of 64 clips at 8 x 158^2, short cycle 112^2.
        assert first.shapes == (Shape(8, 112, 128), Shape(8, 158, 64), Shape(8, 158, 64))
        assert first.accumulate * world_size == 8 and first.global_batch == 512
        assert (first.bn_mode, first.bn_splits, first.max_stride) == ("sub_batchnorm", 8, 8)
        assert [p.lr_factor for p in timeline.phases[:4]] == [8.0, 4.0, 2.0, 1.0]
        assert timeline.lr(epoch=17, step_in_epoch=0) == pytest.approx(0.405, rel=1e-9)
        assert timeline.lr(epoch=73, step_in_epoch=0) == pytest.approx(0.4, rel=1e-9)
        # Phases tile the epochs, and their steps follow each other.
        for a, b in zip(timeline.phases, timeline.phases[1:], strict=False):
            assert b.first_epoch == a.end_epoch
            assert b.first_step == a.first_step + a.epochs * a.steps_per_epoch


def test_multigrid_shapes_scale_the_short_side_jitters_min_with_their_crop() -> None:
    # PySlowFast: min_scale = int(round(256 * crop / 224)), max_scale 320 at every crop:
    # 112 -> 128, 158 -> round(180.57) = 181, 224 -> 256.
    cfg = get_recipe(K400)
    base = cfg.data.train_clip
    assert (base.crop, base.jitter) == ("short_side_jitter", (256, 320))
    timeline = make_timeline(cfg, run_sizes(cfg, world_size=8, train_size=240_000))
    first, last = timeline.phases[0], timeline.phases[-1]
    wanted = {112: (128, 320), 158: (181, 320), 224: (256, 320)}
    for phase in (first, last):
        specs = [r.spec for r in phase.request_cycle(base).cycle]
        assert all(s is not None for s in specs)
        assert [(s.crop_size, s.jitter) for s in specs if s] == [
            (shape.crop, wanted[shape.crop]) for shape in phase.shapes
        ]
    assert [s.crop for s in first.shapes] == [112, 158, 158]
    assert [s.crop for s in last.shapes] == [112, 158, 224]
    # The schedule's own per-shape ranges are the ones the clips are cut with.
    stages = [s for s in timeline.multigrid.stages if s.epochs]  # type: ignore[union-attr]
    assert stages[0].jitter_scales == ((128, 320), (181, 320), (181, 320))


def test_multigrid_lr_inside_an_epoch_uses_the_exact_epoch() -> None:
    cfg = get_recipe(K400)
    timeline = make_timeline(cfg, run_sizes(cfg, world_size=8, train_size=240_000))
    phase = timeline.phase_at(0)
    half = phase.steps_per_epoch // 2
    exact = timeline.multigrid.lr_at(half / phase.steps_per_epoch)  # type: ignore[union-attr]
    assert timeline.lr(epoch=0, step_in_epoch=half) == exact
    assert timeline.evaluates_after(358, every=1)
    assert timeline.evaluates_after(23, every=1)  # the fixture's first checkpoint epoch (22)
    assert not timeline.evaluates_after(22, every=1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["aavg.adaptive_batch=true"], "choose one"),
        (["lr.schedule=step", "lr.milestone_unit=step"], "milestone_unit=epoch"),
    ],
)
def test_multigrid_refuses_what_cannot_change_shape(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):  # at resolution, before any plan is made
        resolve(get_recipe("demo_tsm_r18_8f_multigrid_b32_e10"), overrides)


@pytest.mark.parametrize(("long", "short"), [(True, False), (False, True), (True, True)])
def test_every_cycle_combination_runs_on_one_process_and_tiles_the_epochs(
    long: bool, short: bool
) -> None:
    cfg = apply_overrides(
        get_recipe("demo_tsm_r18_8f_multigrid_b32_e10"),
        [
            f"multigrid.long_cycle={long}",
            f"multigrid.short_cycle={short}",
            "multigrid.bn_base_size=0",
        ],
    )
    timeline = make_timeline(cfg, run_sizes(cfg, world_size=1, train_size=768))
    assert timeline.epochs == 15  # the recipe's 10 x 1.5 (PySlowFast's long-cycle epochs)
    assert sum(p.epochs for p in timeline.phases) == 15
    assert all(len(p.shapes) == (3 if short else 1) for p in timeline.phases)
    assert timeline.phases[-1].shapes[-1] == Shape(8, 32, 16)  # it ends on the base shape
    for p in timeline.phases:
        assert p.steps_per_epoch >= 1
        assert p.clips_before(p.steps_per_epoch) <= 768
