"""The multi-label demo: decodable files, label sets of 2-3 of its 6 classes, objects that move
as their class does in quadrants of their own, and the same bytes from the same seed, pinned by
their SHA-256."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import av
import numpy as np
import pytest

from vidscale.cli.data_cmds import MULTI_LABEL_SIZE
from vidscale.data.annotations import read_class_names
from vidscale.data.layouts import read_layout
from vidscale.data.media.decode import decode_frames, probe
from vidscale.data.synthetic.multilabel import (
    DEFAULT_SIZE,
    MULTI_LABEL_CLASSES,
    OBJECTS,
    REGION,
    draw_object_labels,
    place_objects,
    render_drawn_video,
    render_multilabel_video,
    write_multilabel_dataset,
)
from vidscale.data.synthetic.videos import CLASSES

SMALL = {"size": 32, "num_frames": 8, "workers": 1}


def test_layout_labels_decoding_and_determinism(tmp_path: Path) -> None:
    a = write_multilabel_dataset(tmp_path / "a", seed=3, train_videos=4, val_videos=2, **SMALL)
    # Same seed, more training videos: the videos both have are byte-identical.
    write_multilabel_dataset(tmp_path / "b", seed=3, train_videos=6, val_videos=2, **SMALL)
    write_multilabel_dataset(tmp_path / "c", seed=4, train_videos=1, val_videos=0, **SMALL)
    assert (a.train_videos, a.val_videos, a.classes) == (4, 2, 6)
    classes = read_class_names(tmp_path / "a" / "classes.txt")
    brightness = ("brightening", "darkening")
    assert classes == [c for c in CLASSES if c not in brightness] == list(MULTI_LABEL_CLASSES)
    header, first = (tmp_path / "a" / "train.csv").read_text().splitlines()[:2]
    assert header == "path,labels" and first.startswith("videos/train/train_00000.mp4,")
    splits = read_layout("multilabel", tmp_path / "a")
    assert splits.classes == classes and splits.multi_label and splits.missing == []
    train, val = splits.train, splits.val
    assert (len(train), len(val)) == (4, 2)
    for rec in [*train, *val]:
        assert rec.label_set is not None and len(rec.label_set.labels) in (2, 3)
        meta = probe(rec.path)
        assert (meta.num_frames, meta.width, meta.height) == (8, 32, 32)
        frames = decode_frames(rec.path, list(range(8))).astype(int)
        assert frames.shape == (8, 32, 32, 3) and frames.std() > 20  # textured, not blank
        twin = tmp_path / "b" / rec.path.relative_to(tmp_path / "a")
        assert rec.path.read_bytes() == twin.read_bytes()
    b_train = read_layout("multilabel", tmp_path / "b").train
    assert [r.label_set for r in b_train[:4]] == [r.label_set for r in train]
    other = tmp_path / "c" / train[0].path.relative_to(tmp_path / "a")
    assert train[0].path.read_bytes() != other.read_bytes()


def test_label_sets_have_two_or_three_classes_each_equally_likely() -> None:
    rng = np.random.default_rng(0)
    draws = [draw_object_labels(rng) for _ in range(4000)]
    assert {len(d) for d in draws} == {OBJECTS}
    distinct = Counter(len(set(d)) for d in draws)
    assert set(distinct) == {2, 3}
    assert distinct[2] / len(draws) == pytest.approx(0.5, abs=0.03)
    in_set = Counter(c for d in draws for c in set(d))
    assert set(in_set) == set(range(len(MULTI_LABEL_CLASSES)))
    for c in range(len(MULTI_LABEL_CLASSES)):  # every class in 2.5 / 6 of the label sets
        assert in_set[c] / len(draws) == pytest.approx(2.5 / 6, abs=0.03)
    first = Counter(d[0] for d in draws)  # no class favours a drawing position
    assert max(first.values()) / len(draws) < 1 / 6 + 0.03


@pytest.mark.parametrize("labels", [(0, 3, 4), (1, 1, 4), (5, 3, 2)])
def test_each_object_moves_as_its_class_in_its_own_quadrant(labels: tuple[int, ...]) -> None:
    n, frames = 64, 16
    objects = place_objects(labels, rng=np.random.default_rng(sum(labels)), n=n, num_frames=frames)
    assert [o.label for o in objects] == list(labels)
    region = round(REGION * n)
    corners = set()
    for obj in objects:
        t = obj.trajectory
        # MULTI_LABEL_CLASSES: left, right, up, down, growing, shrinking.
        attribute = {0: t.x, 1: t.x, 2: t.y, 3: t.y}.get(obj.label, np.log(t.half_size))
        direction = [-1, 1, -1, 1, 1, -1][obj.label]
        halves = np.sign(attribute[8] - attribute[0]), np.sign(attribute[15] - attribute[8])
        assert halves == (direction, direction), MULTI_LABEL_CLASSES[obj.label]
        assert np.all(t.gain == 1.0)  # brightness is no class here, nor a nuisance
        corner = (int(t.x.mean() > n / 2), int(t.y.mean() > n / 2))
        low = np.array(corner) * (n - region)
        positions = np.stack([t.x, t.y], axis=1)  # (T, 2)
        assert np.all(np.abs(positions - (low + region / 2)) <= region / 2 + 1)
        corners.add(corner)
    assert len(corners) == len(objects) and REGION == 0.5  # quadrants: no two objects overlap


def test_rendering_is_deterministic_and_checks_its_input() -> None:
    def render() -> np.ndarray:
        rng = np.random.default_rng(5)
        return render_multilabel_video(
            (0, 2, 2), rng=rng, size=32, num_frames=6, noise=4.0, distractors=1
        )

    frames = render()
    assert frames.shape == (6, 32, 32, 3) and frames.dtype == np.uint8
    np.testing.assert_array_equal(frames, render())
    assert np.abs(np.diff(frames.astype(int), axis=0)).mean() > 1  # the objects move
    with pytest.raises(ValueError, match="between 1 and 4 objects"):
        render_multilabel_video(
            (0,) * 5, rng=np.random.default_rng(0), size=32, num_frames=6, noise=0, distractors=0
        )
    for bad, message in (
        ({"size": 31}, "even"),
        ({"num_frames": 2}, "num_frames"),
        ({"train_videos": -1}, ">= 0"),
    ):
        with pytest.raises(ValueError, match=message):
            write_multilabel_dataset(Path("unused"), **bad)  # type: ignore[arg-type]


def test_the_synth_help_names_the_generators_default_size() -> None:
    # `vidscale synth --help` states the side without importing the generator.
    assert MULTI_LABEL_SIZE == DEFAULT_SIZE


# -- the demo's bytes, pinned ---------------------------------------------------------------------

PINNED = {"seed": 5, "train_videos": 2, "val_videos": 1, "size": 32, "num_frames": 8}
# What the generator draws (the frames handed to the encoder) and the annotations it writes:
# a pure function of the seed and numpy's generators, whatever the codec.
FRAMES_SHA256 = {
    "videos/train/train_00000.mp4": "10be1a231065cd961bbc237f2fbbd82013e0d6cbed520c922db68f1ab1de5c0b",
    "videos/train/train_00001.mp4": "303a735b4f001e3739ab2f478070fc96d0d82be9c0083e2973c80a003536e044",
    "videos/val/val_00000.mp4": "b0e3cab36b6d7d974270c70bb8b003a05a5dee15fcca8dd2e0987c756ce5f9e1",
}
ANNOTATIONS_SHA256 = {
    "classes.txt": "8806de439fbe07bf8601f6624c74922e51b760de52cd16f9c8661b6b5210935b",
    "train.csv": "d40e45854264e0704aad43d5a8b581dd7b6ddc4faf27bea2fbac697bec8e072b",
    "val.csv": "7510ab7fbd9e583a53fcd89eb39d963d9a95c48a29be1181e8d11aae0fca333f",
}
# The encoded files, as PyAV 18.1.0's FFmpeg and libx264 write them: another PyAV release
# bundles another encoder (and writes its version into the file), so these hold for that
# release only; the frames above hold for every release.
FILES_SHA256_AV = "18.1.0"
FILES_SHA256 = {
    "videos/train/train_00000.mp4": "e200e1d0c3917df62242c7d0f116500f8bc189cf56763595b06252de518a33a2",
    "videos/train/train_00001.mp4": "15c095c1c21d4460308aa6dd545809e11a833cddf2cce005b2e93ed3c7636e32",
    "videos/val/val_00000.mp4": "3637c24e08c4cfe315d75adeffae72b07284ea0f4dc66628cef6d75d17b40337",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def pinned_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pinned_multilabel")
    write_multilabel_dataset(root, workers=1, **PINNED)
    return root


def test_the_demos_frames_and_annotations_are_pinned(pinned_demo: Path) -> None:
    """Each video's frames as drawn (from its seed, as the writer seeds it) hash to the recorded
    value, and its file holds them (decoded, within the encoder's loss, far from another
    video's); the annotation files are the recorded bytes."""
    written = {p.relative_to(pinned_demo).as_posix() for p in pinned_demo.rglob("*") if p.is_file()}
    assert written == set(FRAMES_SHA256) | set(ANNOTATIONS_SHA256)
    for name, digest in ANNOTATIONS_SHA256.items():
        assert sha256((pinned_demo / name).read_bytes()) == digest, name
    drawn = {}
    for name in FRAMES_SHA256:
        split, k = name.split("/")[1], int(name.rsplit("_", 1)[1].removesuffix(".mp4"))
        rng = np.random.default_rng(np.random.SeedSequence((PINNED["seed"], split == "val", k)))
        drawn[name] = render_drawn_video(rng=rng, size=32, num_frames=8, noise=4.0, distractors=1)
    assert {n: sha256(f.tobytes()) for n, f in drawn.items()} == FRAMES_SHA256
    for name in drawn:
        decoded = decode_frames(pinned_demo / name, list(range(8))).astype(int)
        errors = {n: np.abs(decoded - f.astype(int)).mean() for n, f in drawn.items()}
        # crf 17 on 4:2:0 chroma costs about 6 levels here; another video differs by about 30
        assert errors[name] < 10 and min(e for n, e in errors.items() if n != name) > 20, errors


@pytest.mark.skipif(
    av.__version__ != FILES_SHA256_AV,
    reason=f"the files' hashes are PyAV {FILES_SHA256_AV}'s encoder's (here {av.__version__})",
)
def test_the_demos_files_are_pinned(pinned_demo: Path) -> None:
    files = {name: sha256((pinned_demo / name).read_bytes()) for name in FILES_SHA256}
    assert files == FILES_SHA256
