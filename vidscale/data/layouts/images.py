"""Image layouts: their splits have media "image", and `prepare` stores each image as a
one-frame record.

Classes are the sorted folder names of `train/` (torchvision `ImageFolder`'s order, which
published ImageNet checkpoints use); images are the files with an `IMAGE_EXTENSIONS` suffix (any
case) at any depth below a class folder; hidden entries are skipped. A class folder without
images, a missing image, or a validation label whose class has no `train/` folder is an error
naming the folder or file and line, unless `skip_missing`.

- imagenet: `train/<wnid>/*.JPEG` under the root or Kaggle's `ILSVRC/Data/CLS-LOC/`; validation
  in one of three forms: (a) class folders `val/<wnid>/*.JPEG`; (b) flat `val/*.JPEG` with
  Kaggle's `LOC_val_solution.csv` (`ImageId,PredictionString`, the first word of the prediction
  string being the wnid); (c) flat `val/*.JPEG` with the devkit's
  `ILSVRC2012_validation_ground_truth.txt` (line k: the ILSVRC2012_ID of
  `ILSVRC2012_val_<k:08d>.JPEG`) and `map_clsloc.txt` (`<wnid> <ILSVRC2012_ID> <name>`). (b) is
  used when both label files are present. `meta.mat` is not read (it needs scipy);
  `LOC_synset_mapping.txt` cannot map ILSVRC2012_IDs (its lines are in sorted-wnid order, not ID
  order), but when present its wnids must be exactly the `train/` folders, in order. Label files
  are looked for in `annotations_dir`, else `IMAGENET_ANNOTATION_DIRS` under the root.
- imagefolder: `train/<class>/*` and `val/<class>/*`.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from vidscale.data.annotations import AnnotationError, VideoRecord
from vidscale.data.layouts.common import IMAGE_EXTENSIONS, Missing, lines
from vidscale.data.layouts.registry import Split, register_layout

IMAGENET_VAL_SOLUTION = "LOC_val_solution.csv"  # Kaggle's ImageNet localization challenge
IMAGENET_GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"  # ILSVRC2012 devkit
IMAGENET_ID_MAP = "map_clsloc.txt"  # ILSVRC2015 devkit: the devkit's ILSVRC2012_ID numbering
IMAGENET_SYNSETS = "LOC_synset_mapping.txt"  # Kaggle: one wnid and its words per line, sorted
IMAGENET_ANNOTATION_DIRS = (".", "ILSVRC2012_devkit_t12/data", "ILSVRC/devkit/data", "devkit/data")
"""Where under the root the ImageNet label files are looked for, in this order."""

Labels = Iterator[tuple[str, str, str]]  # (file:line, image file stem, wnid)


def _is_image(name: str) -> bool:
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _class_dirs(directory: Path) -> list[str]:
    """Sorted names of the visible subdirectories (none when `directory` does not exist)."""
    if not directory.is_dir():
        return []
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))


def _images_below(directory: Path) -> list[Path]:
    """Every image at any depth below `directory`, sorted; links followed (as `ImageFolder`)."""
    found: list[Path] = []
    for current, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(Path(current) / name for name in files if _is_image(name))
    return sorted(found)


def _train_classes(train: Path) -> list[str]:
    classes = _class_dirs(train)
    if not classes:
        archives = sorted(p.name for p in train.glob("*.tar")) if train.is_dir() else []
        hint = f"; extract each archive ({archives[0]}, ...) into its folder" if archives else ""
        raise AnnotationError(f"{train}: no class folders (expected train/<class>/){hint}")
    return classes


def _folder_records(
    split_dir: Path, index: dict[str, int], missing: Missing, *, train: Path
) -> list[VideoRecord]:
    """The images of every class folder of `split_dir`, labelled by `index` (the train classes)."""
    records: list[VideoRecord] = []
    for name in _class_dirs(split_dir):
        folder = split_dir / name
        if name not in index:
            reason = f"class {name!r} has no folder in {train}"
            missing.note(folder, where=str(folder), reason=reason)
            continue
        images = _images_below(folder)
        if not images:
            reason = f"no image files ({', '.join(IMAGE_EXTENSIONS)}, any case)"
            missing.note(folder, where=str(folder), reason=reason)
        records.extend(VideoRecord(path, index[name]) for path in images)
    return records


def _find(directories: Sequence[Path], name: str) -> Path | None:
    return next((d / name for d in directories if (d / name).is_file()), None)


@register_layout("imagenet", media="image")
def read_imagenet(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    kaggle = root / "ILSVRC" / "Data" / "CLS-LOC"
    images = kaggle if not (root / "train").is_dir() and (kaggle / "train").is_dir() else root
    train_dir = images / "train"
    classes = _train_classes(train_dir)
    index = {name: i for i, name in enumerate(classes)}
    ann_dirs = [ann] if ann is not None else [root / d for d in IMAGENET_ANNOTATION_DIRS]
    synsets = _find(ann_dirs, IMAGENET_SYNSETS)
    if synsets is not None:
        _check_synsets(synsets, classes, missing, train=train_dir)
    train = _folder_records(train_dir, index, missing, train=train_dir)
    val_dir = images / "val"
    if not val_dir.is_dir():
        raise AnnotationError(f"{val_dir}: validation directory not found")
    with os.scandir(val_dir) as entries:
        flat = {
            os.path.splitext(e.name)[0]: Path(e.path)
            for e in entries
            if e.is_file() and _is_image(e.name)
        }
    if not _class_dirs(val_dir):
        labels = _imagenet_val_labels(val_dir, ann_dirs)
        return classes, train, _labelled(labels, val_dir, flat, index, missing)
    if flat:
        example = min(flat.values()).name
        raise AnnotationError(f"{val_dir}: holds class folders and images ({example}, ...)")
    return classes, train, _folder_records(val_dir, index, missing, train=train_dir)


def _check_synsets(path: Path, classes: list[str], missing: Missing, *, train: Path) -> None:
    """Label indices equal those of models trained on all of ImageNet only when the class
    folders are exactly the published list: a class lost in extraction would shift the rest."""
    listed = [line.split()[0] for _, line in lines(path)]
    if listed != classes:
        absent = [w for w in listed if w not in set(classes)][:3]
        extra = [w for w in classes if w not in set(listed)][:3]
        reason = (
            f"lists {len(listed)} classes in another order or set than the {len(classes)} "
            f"folders of {train} (listed without a folder: {', '.join(absent) or '-'}; "
            f"folders not listed: {', '.join(extra) or '-'})"
        )
        missing.note(path, where=str(path), reason=reason)


def _imagenet_val_labels(val_dir: Path, ann_dirs: Sequence[Path]) -> Labels:
    """The labels of a flat validation directory: Kaggle's solution file, else the devkit's
    ground truth with `map_clsloc.txt`; errors name every place looked in."""
    solution = _find(ann_dirs, IMAGENET_VAL_SOLUTION)
    if solution is not None:
        return _solution_labels(solution)
    truth = _find(ann_dirs, IMAGENET_GROUND_TRUTH)
    where = " or ".join(str(d) for d in ann_dirs)
    if truth is None:
        raise AnnotationError(
            f"{val_dir}: flat validation images need labels: no {IMAGENET_VAL_SOLUTION} or "
            f"{IMAGENET_GROUND_TRUTH} in {where}"
        )
    id_map = _find(ann_dirs, IMAGENET_ID_MAP)
    if id_map is None:
        raise AnnotationError(
            f"{truth}: its ILSVRC2012_IDs need {IMAGENET_ID_MAP} ('n02119789 1 kit_fox' per line) "
            f"in {where}; {IMAGENET_SYNSETS} cannot map them (its lines are in wnid order)"
        )
    return _ground_truth_labels(truth, _read_id_map(id_map))


def _solution_labels(path: Path) -> Labels:
    with path.open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    if not rows or [c.strip() for c in rows[0]] != ["ImageId", "PredictionString"]:
        raise AnnotationError(f"{path}:1: expected the header 'ImageId,PredictionString'")
    for lineno, row in enumerate(rows[1:], start=2):
        if all(not c.strip() for c in row):
            continue
        if len(row) != 2 or not row[0].strip() or not row[1].split():
            raise AnnotationError(
                f"{path}:{lineno}: expected '<ImageId>,<wnid> <box> ...', e.g. "
                "'ILSVRC2012_val_00000001,n01751748 61 21 439 386'"
            )
        yield f"{path}:{lineno}", row[0].strip(), row[1].split()[0]


def _read_id_map(path: Path) -> dict[int, str]:
    """ILSVRC2012_ID -> wnid from `<wnid> <ILSVRC2012_ID> <name>` lines."""
    ids: dict[int, str] = {}
    for lineno, line in lines(path):
        parts = line.split()
        if len(parts) < 2 or not parts[1].isdigit() or int(parts[1]) in ids:
            raise AnnotationError(
                f"{path}:{lineno}: expected '<wnid> <ILSVRC2012_ID> <name>' with a new ID, "
                "e.g. 'n02119789 1 kit_fox'"
            )
        ids[int(parts[1])] = parts[0]
    return ids


def _ground_truth_labels(path: Path, ids: dict[int, str]) -> Labels:
    lines = path.read_text().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    # Line k labels image k: the line number names the image, so no line may be blank.
    for lineno, line in enumerate(lines, start=1):
        where = f"{path}:{lineno}"
        if not line.strip().isdigit():
            raise AnnotationError(f"{where}: expected an ILSVRC2012_ID, got {line.strip()!r}")
        wnid = ids.get(int(line))
        if wnid is None:
            raise AnnotationError(
                f"{where}: ILSVRC2012_ID {line.strip()} is not in {IMAGENET_ID_MAP}"
            )
        yield where, f"ILSVRC2012_val_{lineno:08d}", wnid


def _labelled(
    labels: Labels,
    val_dir: Path,
    flat: dict[str, Path],
    index: dict[str, int],
    missing: Missing,
) -> list[VideoRecord]:
    """Records of a flat validation directory; an image labelled twice is an error."""
    records: list[VideoRecord] = []
    first: dict[str, str] = {}
    for where, name, wnid in labels:
        if name in first:
            raise AnnotationError(f"{where}: {name} is labelled again (first at {first[name]})")
        first[name] = where
        image = flat.get(name)
        expected = image or val_dir / f"{name}.JPEG"
        if wnid in index:
            missing.keep(records, image, index[wnid], where=where, expected=expected)
        else:
            missing.note(expected, where=where, reason=f"class {wnid!r} has no folder in train/")
    return records


@register_layout("imagefolder", media="image")
def read_imagefolder(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    train_dir, val_dir = root / "train", root / "val"
    classes = _train_classes(train_dir)
    index = {name: i for i, name in enumerate(classes)}
    if not _class_dirs(val_dir):
        raise AnnotationError(
            f"{val_dir}: no class folders (expected val/<class>/; for ImageNet's flat validation "
            "directory use the imagenet layout)"
        )
    train = _folder_records(train_dir, index, missing, train=train_dir)
    return classes, train, _folder_records(val_dir, index, missing, train=train_dir)
