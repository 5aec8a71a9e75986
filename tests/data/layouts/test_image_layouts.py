"""The image layouts, built as tiny directories of real JPEG/PNG/BMP/WebP files with the
publishers' file names and label formats: ImageNet's three validation forms and image folders."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from vidscale.data.annotations import AnnotationError
from vidscale.data.layouts import LayoutSplits, read_layout
from vidscale.data.prepared.shards import encode_jpeg

# Three classes with their ILSVRC2012_IDs (map_clsloc.txt): the IDs do not follow wnid order.
WNIDS = {
    "n01440764": (449, "tench"),
    "n01443537": (450, "goldfish"),
    "n01484850": (442, "great_white_shark"),
}
SORTED = sorted(WNIDS)
# Validation image k -> wnid, for the flat forms.
VAL_LABELS = ["n01443537", "n01484850", "n01440764", "n01443537"]


def write_image(path: Path, *, seed: int = 0, size: tuple[int, int] = (12, 16)) -> Path:
    """A real image file, its format chosen by the suffix (JPEG via simplejpeg, else OpenCV)."""
    rgb = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() in (".jpg", ".jpeg"):
        path.write_bytes(encode_jpeg(rgb, quality=90))
    else:
        ok, data = cv2.imencode(path.suffix.lower(), rgb[:, :, ::-1])
        assert ok
        path.write_bytes(data.tobytes())
    return path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def imagenet_train(images: Path) -> None:
    """train/<wnid>/<wnid>_<k>.JPEG, two per class."""
    for i, wnid in enumerate(SORTED):
        for k in range(2):
            write_image(images / "train" / wnid / f"{wnid}_{k + 1}.JPEG", seed=10 * i + k)


def flat_val(images: Path) -> None:
    for k in range(1, len(VAL_LABELS) + 1):
        write_image(images / "val" / f"ILSVRC2012_val_{k:08d}.JPEG", seed=100 + k)


def map_clsloc() -> str:
    return "".join(f"{w} {i} {name}\n" for w, (i, name) in WNIDS.items())


def solution_csv(labels: list[str]) -> str:
    rows = [f"ILSVRC2012_val_{k:08d},{w} 10 20 30 40 {w} 1 2 3 4" for k, w in enumerate(labels, 1)]
    return "ImageId,PredictionString\n" + "\n".join(rows) + "\n"


def val_labels(splits: LayoutSplits) -> list[tuple[str, str]]:
    return [(r.path.name, splits.classes[r.label]) for r in splits.val]


EXPECTED_FLAT_VAL = [(f"ILSVRC2012_val_{k:08d}.JPEG", w) for k, w in enumerate(VAL_LABELS, start=1)]


def test_imagenet_class_folder_validation(tmp_path: Path) -> None:
    imagenet_train(tmp_path)
    for i, wnid in enumerate(SORTED):
        write_image(tmp_path / "val" / wnid / f"ILSVRC2012_val_{i + 1:08d}.JPEG", seed=i)
    splits = read_layout("imagenet", tmp_path)
    assert splits.classes == SORTED and splits.media == "image"
    assert [(r.path.name, r.label) for r in splits.train] == [
        (f"{w}_{k}.JPEG", i) for i, w in enumerate(SORTED) for k in (1, 2)
    ]
    assert [(r.path.parent.name, r.label) for r in splits.val] == [
        (w, i) for i, w in enumerate(SORTED)
    ]
    assert splits.missing == []


def test_imagenet_kaggle_layout_with_val_solution_and_synset_mapping(tmp_path: Path) -> None:
    images = tmp_path / "ILSVRC" / "Data" / "CLS-LOC"
    imagenet_train(images)
    flat_val(images)
    write(tmp_path / "LOC_val_solution.csv", solution_csv(VAL_LABELS))
    write(tmp_path / "LOC_synset_mapping.txt", "".join(f"{w} words, more words\n" for w in SORTED))
    splits = read_layout("imagenet", tmp_path)
    assert splits.classes == SORTED
    assert sorted(val_labels(splits)) == EXPECTED_FLAT_VAL
    assert all(r.path.parent == images / "val" for r in splits.val)


def test_imagenet_devkit_ground_truth_with_map_clsloc(tmp_path: Path) -> None:
    imagenet_train(tmp_path)
    flat_val(tmp_path)
    gt = "".join(f"{WNIDS[w][0]}\n" for w in VAL_LABELS)
    write(
        tmp_path / "ILSVRC2012_devkit_t12" / "data" / "ILSVRC2012_validation_ground_truth.txt", gt
    )
    write(tmp_path / "map_clsloc.txt", map_clsloc())
    splits = read_layout("imagenet", tmp_path)
    assert val_labels(splits) == EXPECTED_FLAT_VAL


def test_imagenet_val_solution_wins_over_the_ground_truth(tmp_path: Path) -> None:
    imagenet_train(tmp_path)
    flat_val(tmp_path)
    write(tmp_path / "LOC_val_solution.csv", solution_csv(VAL_LABELS))
    write(tmp_path / "ILSVRC2012_validation_ground_truth.txt", "not read\n")
    assert val_labels(read_layout("imagenet", tmp_path)) == EXPECTED_FLAT_VAL


def test_imagenet_ground_truth_names_its_line_for_a_missing_image(tmp_path: Path) -> None:
    imagenet_train(tmp_path)
    flat_val(tmp_path)
    (tmp_path / "val" / "ILSVRC2012_val_00000003.JPEG").unlink()
    gt = write(tmp_path / "ILSVRC2012_validation_ground_truth.txt", "450\n442\n449\n450\n\n")
    write(tmp_path / "map_clsloc.txt", map_clsloc())
    with pytest.raises(AnnotationError, match=r"ground_truth\.txt:3: missing image .*val_00000003"):
        read_layout("imagenet", tmp_path)
    splits = read_layout("imagenet", tmp_path, skip_missing=True)
    assert [name for name, _ in val_labels(splits)] == [
        "ILSVRC2012_val_00000001.JPEG",
        "ILSVRC2012_val_00000002.JPEG",
        "ILSVRC2012_val_00000004.JPEG",
    ]
    assert splits.missing == [
        (str(tmp_path / "val" / "ILSVRC2012_val_00000003.JPEG"), f"{gt}:3: missing image")
    ]


@pytest.mark.parametrize(
    ("gt", "id_map", "match"),
    [
        ("450\n\n442\n", None, r"ground_truth\.txt:2: expected an ILSVRC2012_ID, got ''"),
        ("450\n7\n", None, r"ground_truth\.txt:2: ILSVRC2012_ID 7 is not in map_clsloc\.txt"),
        ("450\n", "n01440764 449 tench\nn01443537 goldfish\n", r"map_clsloc\.txt:2: expected"),
        ("450\n", "n01440764 449 tench\nn01443537 449 goldfish\n", r"map_clsloc\.txt:2: expected"),
    ],
)
def test_imagenet_malformed_ground_truth_or_map_names_file_and_line(
    tmp_path: Path, gt: str, id_map: str | None, match: str
) -> None:
    imagenet_train(tmp_path)
    flat_val(tmp_path)
    write(tmp_path / "ILSVRC2012_validation_ground_truth.txt", gt)
    write(tmp_path / "map_clsloc.txt", id_map or map_clsloc())
    with pytest.raises(AnnotationError, match=match):
        read_layout("imagenet", tmp_path)


def test_imagenet_ground_truth_needs_map_clsloc_not_the_synset_list(tmp_path: Path) -> None:
    imagenet_train(tmp_path)
    flat_val(tmp_path)
    write(tmp_path / "ILSVRC2012_validation_ground_truth.txt", "450\n442\n449\n450\n")
    write(tmp_path / "LOC_synset_mapping.txt", "".join(f"{w} words\n" for w in SORTED))
    with pytest.raises(AnnotationError, match=r"need map_clsloc\.txt.*LOC_synset_mapping\.txt"):
        read_layout("imagenet", tmp_path)


def test_imagenet_flat_val_without_labels_names_what_was_looked_for(tmp_path: Path) -> None:
    imagenet_train(tmp_path)
    flat_val(tmp_path)
    with pytest.raises(AnnotationError, match=r"LOC_val_solution\.csv or ILSVRC2012_validation"):
        read_layout("imagenet", tmp_path)


def test_imagenet_unknown_val_class_and_bad_solution_rows(tmp_path: Path) -> None:
    imagenet_train(tmp_path)
    flat_val(tmp_path)
    solution = write(
        tmp_path / "LOC_val_solution.csv", solution_csv([*VAL_LABELS[:3], "n09999999"])
    )
    with pytest.raises(AnnotationError, match=r"solution\.csv:5: class 'n09999999' has no folder"):
        read_layout("imagenet", tmp_path)
    splits = read_layout("imagenet", tmp_path, skip_missing=True)
    assert len(splits.val) == 3
    assert splits.missing[0][0].endswith("ILSVRC2012_val_00000004.JPEG")
    write(solution, "ImageId,PredictionString\nILSVRC2012_val_00000001,\n")
    with pytest.raises(AnnotationError, match=r"solution\.csv:2: expected '<ImageId>,<wnid>"):
        read_layout("imagenet", tmp_path)
    write(solution, "ImageId,PredictionString\n" + 2 * "ILSVRC2012_val_00000001,n01440764\n")
    with pytest.raises(AnnotationError, match=r"solution\.csv:3: .*labelled again .*csv:2"):
        read_layout("imagenet", tmp_path)
    write(solution, "image,label\n")
    with pytest.raises(AnnotationError, match=r"solution\.csv:1: expected the header"):
        read_layout("imagenet", tmp_path)


def test_imagenet_synset_mapping_must_match_the_class_folders(tmp_path: Path) -> None:
    imagenet_train(tmp_path)
    for wnid in SORTED:
        write_image(tmp_path / "val" / wnid / "a.JPEG")
    listed = [*SORTED, "n01491361"]
    synsets = write(tmp_path / "LOC_synset_mapping.txt", "".join(f"{w} x\n" for w in listed))
    with pytest.raises(AnnotationError, match=r"lists 4 classes .* without a folder: n01491361"):
        read_layout("imagenet", tmp_path)
    splits = read_layout("imagenet", tmp_path, skip_missing=True)
    assert splits.classes == SORTED
    assert [path for path, _ in splits.missing] == [str(synsets)]


def test_imagenet_annotations_dir_is_the_only_place_looked_in(tmp_path: Path) -> None:
    imagenet_train(tmp_path)
    flat_val(tmp_path)
    write(tmp_path / "LOC_val_solution.csv", solution_csv(VAL_LABELS))
    labels = tmp_path / "labels"
    with pytest.raises(AnnotationError, match=str(labels)):
        read_layout("imagenet", tmp_path, annotations_dir=labels)
    write(labels / "LOC_val_solution.csv", solution_csv(VAL_LABELS[::-1]))
    splits = read_layout("imagenet", tmp_path, annotations_dir=labels)
    assert [w for _, w in val_labels(splits)] == VAL_LABELS[::-1]


def test_imagenet_refuses_unextracted_archives_and_mixed_validation(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "n01440764.tar").write_bytes(b"")
    with pytest.raises(AnnotationError, match=r"no class folders .*n01440764\.tar"):
        read_layout("imagenet", tmp_path)
    imagenet_train(tmp_path)
    flat_val(tmp_path)
    write_image(tmp_path / "val" / SORTED[0] / "x.JPEG")
    with pytest.raises(AnnotationError, match=r"class folders and images"):
        read_layout("imagenet", tmp_path)


# image folders -------------------------------------------------------------------------------


def test_imagefolder_reads_every_image_extension_in_any_case(tmp_path: Path) -> None:
    cats, dogs = tmp_path / "train" / "cat", tmp_path / "train" / "dog"
    names = ["a.jpg", "b.JPEG", "c.png", "d.Bmp", "e.webp"]
    for name in names:
        write_image(cats / name)
    write_image(dogs / "nested" / "f.jpg")  # any depth below the class folder
    write(cats / "notes.txt", "not an image")
    write_image(cats / ".hidden.jpg")
    write_image(tmp_path / "train" / ".cache" / "g.jpg")  # a hidden folder is not a class
    write_image(tmp_path / "val" / "dog" / "h.jpg")
    splits = read_layout("imagefolder", tmp_path)
    assert splits.classes == ["cat", "dog"] and splits.media == "image"
    assert [(r.path.name, r.label) for r in splits.train] == [(n, 0) for n in names] + [
        ("f.jpg", 1)
    ]
    assert [(r.path.name, r.label) for r in splits.val] == [("h.jpg", 1)]


def test_imagefolder_empty_or_unknown_class_folders(tmp_path: Path) -> None:
    write_image(tmp_path / "train" / "cat" / "a.jpg")
    (tmp_path / "train" / "dog").mkdir()
    write_image(tmp_path / "val" / "cat" / "b.jpg")
    with pytest.raises(AnnotationError, match=r"train/dog: no image files"):
        read_layout("imagefolder", tmp_path)
    assert [p for p, _ in read_layout("imagefolder", tmp_path, skip_missing=True).missing] == [
        str(tmp_path / "train" / "dog")
    ]
    write_image(tmp_path / "train" / "dog" / "c.jpg")
    write_image(tmp_path / "val" / "bird" / "d.jpg")
    with pytest.raises(AnnotationError, match=r"val/bird: class 'bird' has no folder in"):
        read_layout("imagefolder", tmp_path)
    splits = read_layout("imagefolder", tmp_path, skip_missing=True)
    assert [r.path.name for r in splits.val] == ["b.jpg"]


def test_imagefolder_needs_class_folders_in_both_splits(tmp_path: Path) -> None:
    with pytest.raises(AnnotationError, match=r"train: no class folders"):
        read_layout("imagefolder", tmp_path)
    write_image(tmp_path / "train" / "cat" / "a.jpg")
    write_image(tmp_path / "val" / "b.jpg")
    with pytest.raises(AnnotationError, match=r"val: no class folders .*imagenet layout"):
        read_layout("imagefolder", tmp_path)
