"""The I3D-NL recipes: PySlowFast's I3D_NLN_8x8_R50 schedule on MMAction2's 32x2 clips."""

import pytest

from vidscale.cli import main
from vidscale.recipes import get_recipe

PLAIN, MULTIGRID = "i3d_nl_r50_k400_32f_b64_e196", "i3d_nl_r50_k400_32f_multigrid_b64_e196"


@pytest.mark.parametrize("name", [PLAIN, MULTIGRID])
def test_recipe_follows_its_sources(name: str) -> None:
    cfg = get_recipe(name)
    # PySlowFast's softmax blocks on the non-local paper's own I3D basis (MMAction2's tensors)
    assert cfg.model.name == "i3d_nl_embedded_gaussian_resnet50_ref"
    assert (cfg.model.frames, cfg.model.dropout) == (32, 0.5)
    clip = cfg.data.train_clip
    assert (clip.frames, clip.sampling, clip.stride, clip.crop_size) == (32, "dense", 2, 224)
    assert cfg.data.batch_size * cfg.optim.simulate_world_size == 64
    assert cfg.optim.lr_per_8_clips * 8 == pytest.approx(0.1)  # BASE_LR 0.1 for 64 clips
    assert (cfg.lr.schedule, cfg.lr.warmup_epochs, cfg.train.epochs) == ("cosine", 34.0, 196)
    assert cfg.lr.warmup_start_factor == pytest.approx(0.1)  # WARMUP_START_LR 0.01
    assert cfg.multigrid.enabled == (name == MULTIGRID)


def test_schedule_prints_the_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedule", PLAIN]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(PLAIN)
    first = lines[2].split()  # epoch 0: 32 frames, 224 px, 64 clips, the warmup's 0.01
    assert first[:5] == ["0", "32", "224", "64", "8"] and float(first[5]) == pytest.approx(0.01)
