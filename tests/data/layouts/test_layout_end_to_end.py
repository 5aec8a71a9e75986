"""A UCF101 and a Kinetics directory, as their publishers lay them out, go through `prepare`,
training from the shards (`vidscale train --set data.source=shards`) and `vidscale eval`'s
`evaluate_run`, with no edits in between."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.tiny_run import recomputed_top1
from vidscale.cli import main
from vidscale.data.media.decode import decode_all
from vidscale.data.prepared.prepare import open_prepared, prepare_from_layout
from vidscale.data.synthetic.videos import CLASSES, write_synthetic_dataset
from vidscale.data.synthetic.writer import encode_h264
from vidscale.train.evaluation.eval_run import Views, evaluate_run

N_CLASSES = 4  # the first four demo classes: left/right, up/down
TRAIN_PER_CLASS, VAL_PER_CLASS = 2, 1


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    write_synthetic_dataset(
        root,
        seed=4,
        train_per_class=TRAIN_PER_CLASS,
        val_per_class=VAL_PER_CLASS,
        size=32,
        num_frames=8,
        workers=1,
    )
    return root


def demo_videos(demo: Path, split: str, label: int) -> list[Path]:
    name = CLASSES[label]
    return sorted((demo / "videos" / split / name).glob("*.mp4"))


def ucf101_layout(demo: Path, root: Path) -> dict[str, int]:
    """`UCF-101/<Class>/v_<Class>_gGG_cCC.avi` (real AVI files) and `ucfTrainTestlist/`; classes
    numbered in reverse so that label order differs from alphabetical order. Returns the
    expected label of each test video."""
    names = [CLASSES[i].title().replace("_", "") for i in range(N_CLASSES)]  # e.g. MovingLeft
    order = names[::-1]
    lists = root / "ucfTrainTestlist"
    lists.mkdir(parents=True)
    (lists / "classInd.txt").write_text("".join(f"{i} {c}\r\n" for i, c in enumerate(order, 1)))
    train, test, expected = [], [], {}
    for label, name in enumerate(names):
        for split, group in (("train", 8), ("val", 1)):
            for k, src in enumerate(demo_videos(demo, split, label)):
                rel = f"{name}/v_{name}_g{group + k:02d}_c01.avi"
                frames = np.stack(list(decode_all(src)))
                encode_h264(frames, root / "UCF-101" / rel, fps=15, gop=8)
                if split == "train":
                    train.append(f"{rel} {order.index(name) + 1}")
                else:
                    test.append(rel)
                    expected[Path(rel).name] = order.index(name)
    (lists / "trainlist01.txt").write_text("\r\n".join(train) + "\r\n")
    (lists / "testlist01.txt").write_text("\r\n".join(test) + "\r\n")
    return expected


def kinetics_layout(demo: Path, root: Path) -> dict[str, int]:
    """`train.csv`/`validate.csv` and `<split>/<label>/<id>_<start>_<end>.mp4`; labels are
    numbered alphabetically. Returns the expected label of each validation video."""
    header = "label,youtube_id,time_start,time_end,split\n"
    rows = {"train": [header], "val": [header]}
    labels = [CLASSES[i].replace("_", " ") for i in range(N_CLASSES)]  # e.g. "moving left"
    expected = {}
    for label, text in enumerate(labels):
        for split in ("train", "val"):
            for k, src in enumerate(demo_videos(demo, split, label)):
                youtube_id = f"{split[0]}{label}{k}".ljust(11, "x")
                start = 10 * k
                name = f"{youtube_id}_{start:06d}_{start + 10:06d}.mp4"
                target = root / split / text / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, target)
                rows[split].append(f"{text},{youtube_id},{start},{start + 10},{split}\n")
                if split == "val":
                    expected[name] = sorted(labels).index(text)
    (root / "train.csv").write_text("".join(rows["train"]))
    (root / "validate.csv").write_text("".join(rows["val"]))
    return expected


def train_and_evaluate(prepared: Path, run: Path) -> dict:
    code = main(
        [
            "train",
            "--recipe",
            "demo_tsm_r18_8f_b32_e12",
            "--data",
            str(prepared),
            "--out",
            str(run),
            "--set",
            "data.source=shards",
            "--set",
            "model.name=tsm_resnet18",
            "--set",
            "data.train_clip.frames=4",
            "--set",
            "data.eval_clip.frames=4",
            "--set",
            "data.train_clip.crop_size=32",
            "--set",
            "data.batch_size=4",
            "--set",
            "data.workers=0",
            "--set",
            "train.epochs=1",
            "--set",
            "train.progress=false",
            "--set",
            "train.threads=1",
        ]
    )
    assert code == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["skipped"] in ({}, [])
    return summary


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ucf101", "kinetics"])
def test_layout_prepare_train_evaluate(kind: str, demo: Path, tmp_path: Path) -> None:
    root = tmp_path / kind
    build = ucf101_layout if kind == "ucf101" else kinetics_layout
    expected = build(demo, root)
    prepared = tmp_path / f"{kind}_prepared"
    manifest = prepare_from_layout(kind, root, prepared, short_side=0, workers=1, progress=False)
    assert manifest.skipped == []
    assert manifest.counts["train"] == N_CLASSES * TRAIN_PER_CLASS
    assert manifest.counts["val"] == N_CLASSES * VAL_PER_CLASS
    data = open_prepared(prepared)
    assert {Path(e.path).name: e.label for e in data.val} == expected
    assert all(e.num_frames == 8 for e in data.train + data.val)

    run = tmp_path / f"{kind}_run"
    train_and_evaluate(prepared, run)
    assert (run / "classes.txt").read_text().split("\n")[:N_CLASSES] == data.classes

    result = evaluate_run(run, last=2, views=Views(num_clips=2, num_crops=3), keep_scores=True)
    assert result["videos"] == len(expected)
    assert len(result["checkpoints"]) == 1
    assert result["views"]["per_video"] == 6
    assert result["top1_mean"] == pytest.approx(recomputed_top1(run, result), abs=1e-9)
    assert result["skipped"] == []
