"""Images through the one training loop: layout -> (prepare) -> train -> eval, end to end.

The built-in image demo set is written small (real JPEGs), once as the generic `imagefolder`
layout trained from the files, once rearranged into the ImageNet layout as published (wnid
class folders; validation flat with Kaggle's `LOC_val_solution.csv`, or in class folders),
prepared into one-frame shards and trained from them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.tiny_run import recomputed_top1
from vidscale.config import apply_overrides
from vidscale.data.prepared.prepare import open_prepared, prepare_from_layout
from vidscale.data.synthetic.images import CLASSES, write_synthetic_images
from vidscale.recipes import get_recipe
from vidscale.train.evaluation.eval_run import evaluate_run
from vidscale.train.loop import train

SMALL = [
    "data.batch_size=8",
    "data.workers=0",
    "optim.simulate_world_size=0",
    "train.epochs=1",
    "train.progress=false",
    "train.threads=1",
]


def imagenet_from(folder: Path, out: Path, *, flat_val: bool) -> Path:
    """The imagefolder set rearranged as ImageNet ships it: class i is wnid n{i:08d}."""
    wnid = {name: f"n{i:08d}" for i, name in enumerate(sorted(CLASSES))}
    rows = ["ImageId,PredictionString"]
    for split in ("train", "val"):
        for name, w in wnid.items():
            for k, image in enumerate(sorted((folder / split / name).iterdir())):
                if split == "val" and flat_val:
                    target = out / "val" / f"ILSVRC2012_val_{w}_{k:04d}.JPEG"
                    rows.append(f"{target.stem},{w} 0 0 31 31")
                else:
                    target = out / split / w / f"{w}_{k:04d}.JPEG"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(image, target)
    if flat_val:
        (out / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    return out


@pytest.fixture(scope="module")
def image_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images") / "demo"
    write_synthetic_images(root, seed=1, train_per_class=3, val_per_class=2, size=32)
    return root


def train_and_evaluate(data: Path, run: Path, extra: list[str]) -> dict:
    cfg = apply_overrides(
        get_recipe("demo_resnet18_images_b64_e10_sgd"), [f"data.root={data}", *SMALL, *extra]
    )
    train(cfg, run_dir=run)
    result = evaluate_run(run, last=1, keep_scores=True)
    assert result["top1_mean"] == pytest.approx(recomputed_top1(run, result), abs=1e-9)
    return result


@pytest.mark.slow
def test_an_image_folder_trains_and_evaluates_from_the_files(
    image_demo: Path, tmp_path: Path
) -> None:
    result = train_and_evaluate(image_demo, tmp_path / "run", [])
    assert result["videos"] == result["listed"] == 2 * len(CLASSES)
    assert (tmp_path / "run" / "summary.json").is_file()


def test_an_image_folder_prepares_trains_and_evaluates(image_demo: Path, tmp_path: Path) -> None:
    prep = tmp_path / "prep"
    manifest = prepare_from_layout("imagefolder", image_demo, prep, workers=1, progress=False)
    assert manifest.counts["val"] == 2 * len(CLASSES) and not manifest.skipped
    result = train_and_evaluate(prep, tmp_path / "run", ["data.source=shards"])
    assert result["videos"] == 2 * len(CLASSES)


@pytest.mark.parametrize("flat_val", [True, False])
def test_imagenet_layout_prepares_trains_and_evaluates(
    image_demo: Path, tmp_path: Path, flat_val: bool
) -> None:
    imagenet = imagenet_from(image_demo, tmp_path / "imagenet", flat_val=flat_val)
    prep = tmp_path / "prep"
    manifest = prepare_from_layout("imagenet", imagenet, prep, workers=1, progress=False)
    assert manifest.counts["train"] == 3 * len(CLASSES) and not manifest.skipped
    data = open_prepared(prep)
    assert all(e.num_frames == 1 for e in data.train + data.val)
    result = train_and_evaluate(
        prep, tmp_path / "run", ["data.source=shards", "data.layout=imagenet"]
    )
    assert result["videos"] == 2 * len(CLASSES)
