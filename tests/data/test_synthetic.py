from pathlib import Path

from vidscale.data.annotations import read_annotations, read_class_names
from vidscale.data.decode import probe
from vidscale.data.synthetic import CLASSES, write_synthetic_dataset


def test_layout_and_determinism(tmp_path: Path) -> None:
    a = write_synthetic_dataset(
        tmp_path / "a", seed=3, train_per_class=1, val_per_class=1, workers=1
    )
    write_synthetic_dataset(tmp_path / "b", seed=3, train_per_class=1, val_per_class=1, workers=1)
    assert (a.train_videos, a.val_videos) == (8, 8)
    classes = read_class_names(tmp_path / "a" / "classes.txt")
    assert classes == list(CLASSES)
    train = read_annotations(tmp_path / "a" / "train.csv", classes=classes)
    assert sorted(r.label for r in train) == list(range(8))
    for rec in train:
        twin = tmp_path / "b" / rec.path.relative_to(tmp_path / "a")
        assert rec.path.read_bytes() == twin.read_bytes()
        meta = probe(rec.path)
        assert (meta.num_frames, meta.width, meta.height) == (16, 32, 32)
    c = write_synthetic_dataset(
        tmp_path / "c", seed=4, train_per_class=1, val_per_class=0, workers=1
    )
    assert c.train_videos == 8
    assert (
        train[0].path.read_bytes()
        != (tmp_path / "c" / train[0].path.relative_to(tmp_path / "a")).read_bytes()
    )
