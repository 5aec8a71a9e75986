"""The recipes whose PySlowFast yaml sets DATA.TRAIN_JITTER_SCALES train with its short-side
jitter (range, sampling, flip as the yaml says); every other recipe keeps its own crop."""

import pytest

from vidscale.recipes import get_recipe, list_recipes

# name: (TRAIN_JITTER_SCALES, INV_UNIFORM_SAMPLE, RANDOM_FLIP) of the recipe's yaml.
JITTERED = {
    "slowfast_r50_k400_8x8_multigrid_b64_e239": ((256, 320), "uniform", True),
    "i3d_r50_k400_32f_multigrid_b64_e100": ((256, 320), "uniform", True),
    "i3d_nl_r50_k400_32f_b64_e196": ((256, 320), "uniform", True),
    "i3d_nl_r50_k400_32f_multigrid_b64_e196": ((256, 320), "uniform", True),
    "slowfast_r50_ssv2_16x8_multigrid_b128_e22": ((256, 320), "inverse_uniform", False),
    "slowfast_r50_charades_16x8_multigrid_b128_e57": ((256, 340), "inverse_uniform", True),
}


@pytest.mark.parametrize("name", sorted(JITTERED))
def test_pyslowfast_recipes_train_with_their_yamls_jitter(name: str) -> None:
    cfg = get_recipe(name)
    clip = cfg.data.train_clip
    jitter, sampling, flip = JITTERED[name]
    assert (clip.crop, clip.jitter, clip.jitter_sampling, clip.flip) == (
        "short_side_jitter",
        jitter,
        sampling,
        flip,
    )
    assert clip.crop_size == 224  # TRAIN_CROP_SIZE
    assert cfg.data.eval_clip.crop == "multiscale"  # evaluation ignores it; left at the default


def test_the_jitter_is_used_by_those_recipes_only_and_tsm_tsn_keep_multiscale() -> None:
    crops = {name: get_recipe(name).data.train_clip.crop for name in list_recipes()}
    assert {n for n, crop in crops.items() if crop == "short_side_jitter"} == set(JITTERED)
    tsm_tsn = [n for n in crops if "tsm" in n or "tsn" in n]
    assert len(tsm_tsn) > 20 and {crops[n] for n in tsm_tsn} == {"multiscale"}
