"""UCF101 and HMDB51: three numbered train/test splits each (`data.split`).

UCF101: `ucfTrainTestlist/{classInd,trainlist0N,testlist0N}.txt`, videos `UCF-101/<Class>/*.avi`.
HMDB51: `testTrainMulti_7030_splits/<class>_test_splitN.txt` (tag 1 train, 2 test, 0 unused),
videos `<class>/<video>.avi`.
"""

from __future__ import annotations

from pathlib import Path

from vidscale.data.annotations import AnnotationError, VideoRecord
from vidscale.data.layouts.common import Missing, first_dir, lines
from vidscale.data.layouts.registry import Split, register_layout


@register_layout("ucf101", numbered_splits=True)
def read_ucf101(root: Path, ann: Path | None, missing: Missing, split: int) -> Split:
    ann = ann or first_dir(root / "ucfTrainTestlist", root)
    videos = first_dir(root / "UCF-101", root)
    class_file = ann / "classInd.txt"
    numbered: dict[int, str] = {}
    for lineno, line in lines(class_file):
        parts = line.split()
        if len(parts) != 2 or not parts[0].isdigit():
            raise AnnotationError(f"{class_file}:{lineno}: expected '<index> <class>'")
        numbered[int(parts[0])] = parts[1]
    if sorted(numbered) != list(range(1, len(numbered) + 1)):
        raise AnnotationError(f"{class_file}: class indices are not 1..{len(numbered)}")
    classes = [numbered[i] for i in range(1, len(numbered) + 1)]
    by_name = {name.lower(): i for i, name in enumerate(classes)}

    train: list[VideoRecord] = []
    train_file = ann / f"trainlist0{split}.txt"
    for lineno, line in lines(train_file):
        where = f"{train_file}:{lineno}"
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise AnnotationError(f"{where}: expected '<Class>/<video>.avi <index>'")
        label = int(parts[1]) - 1
        if not 0 <= label < len(classes):
            raise AnnotationError(f"{where}: class index {parts[1]} not in classInd.txt")
        missing.keep(train, videos / parts[0], label, where=where, expected=videos / parts[0])

    val: list[VideoRecord] = []
    test_file = ann / f"testlist0{split}.txt"
    for lineno, line in lines(test_file):
        where = f"{test_file}:{lineno}"
        rel = line.split()[0]
        # Test lists carry no label: the directory names the class.
        class_dir = rel.split("/")[0] if "/" in rel else ""
        if class_dir.lower() not in by_name:
            raise AnnotationError(f"{where}: directory {class_dir!r} is not a class of classInd")
        missing.keep(
            val, videos / rel, by_name[class_dir.lower()], where=where, expected=videos / rel
        )
    return classes, train, val


@register_layout("hmdb51", numbered_splits=True)
def read_hmdb51(root: Path, ann: Path | None, missing: Missing, split: int) -> Split:
    ann = ann or first_dir(root / "testTrainMulti_7030_splits", root / "splits", root)
    suffix = f"_test_split{split}.txt"
    files = sorted(ann.glob(f"*{suffix}")) if ann.is_dir() else []
    if not files:
        raise AnnotationError(f"{ann}: no '<class>{suffix}' files")
    classes = sorted(f.name[: -len(suffix)] for f in files)
    videos = first_dir(root / "videos", root)
    out: dict[str, list[VideoRecord]] = {"1": [], "2": []}
    for label, name in enumerate(classes):
        split_file = ann / f"{name}{suffix}"
        for lineno, line in lines(split_file):
            where = f"{split_file}:{lineno}"
            parts = line.split()
            if len(parts) != 2 or parts[1] not in ("0", "1", "2"):
                raise AnnotationError(f"{where}: expected '<video>.avi <0|1|2>'")
            if parts[1] == "0":  # not used by this split
                continue
            video = videos / name / parts[0]
            missing.keep(out[parts[1]], video, label, where=where, expected=video)
    return classes, out["1"], out["2"]
