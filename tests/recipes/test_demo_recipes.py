"""The demo recipes' test views: two clips that together read every frame of a demo video once
(the TSM code's twice-sample), and one clip where a study or recipe was measured with one."""

import inspect
from pathlib import Path

import pytest

from vidscale.config import apply_overrides
from vidscale.data.clip import clip_positions
from vidscale.data.synthetic.videos import write_synthetic_dataset
from vidscale.recipes import get_recipe
from vidscale.studies.two_stream import RGB_RECIPE, TwoStreamStudySpec, run_overrides

DEMO_FRAMES = inspect.signature(write_synthetic_dataset).parameters["num_frames"].default


@pytest.mark.parametrize("name", ["demo_tsm_r18_8f_b32_e12", "demo_tsn_r18_8f_b32_e12"])
def test_demo_test_clips_read_every_frame_once(name: str) -> None:
    spec = get_recipe(name).data.eval_clip
    assert spec.num_clips == 2
    read = [clip_positions(DEMO_FRAMES, spec, rng=None, clip_index=k) for k in range(2)]
    assert sorted(int(i) for clip in read for i in clip) == list(range(DEMO_FRAMES))


def test_multigrid_demo_keeps_the_one_clip_it_was_measured_with() -> None:
    assert get_recipe("demo_tsm_r18_8f_multigrid_b32_e10").data.eval_clip.num_clips == 1


def test_two_stream_study_tests_rgb_on_the_flow_streams_one_clip() -> None:
    spec = TwoStreamStudySpec(data=Path("PREP"), out=Path("STUDY"))
    rgb = apply_overrides(get_recipe(RGB_RECIPE), list(run_overrides(spec)["rgb"]))
    assert rgb.data.eval_clip.num_clips == 1
    assert get_recipe("demo_tsm_r18_flow_8f_b32_e10").data.eval_clip.num_clips == 1
