"""Kinetics (400/600/700): the DeepMind CSVs as every distributor names them.

One training and one validation CSV with the header
`label,youtube_id,time_start,time_end,split`, under any name its distributors use
(`KINETICS_ANNOTATIONS`: DeepMind's `train.csv`/`validate.csv`, the CVDF mirror's `val.csv`,
MMAction2's `kinetics_{train,val}.csv`, the ActivityNet crawler's
`kinetics-{400,600}_{train,val}.csv`, ...), in `annotations/` or the root; videos
`<split>/<label>/<id>_<s:06d>_<e:06d>.mp4`, flat `<split>/<id>_<s:06d>_<e:06d>.mp4`, or
`<id>.mp4` (.webm, .mkv too), `<split>` being `train`/`val` (or MMAction2's `videos_train`/
`videos_val`). Test CSVs are not read (their labels were withheld).
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from vidscale.data.annotations import AnnotationError, VideoRecord
from vidscale.data.layouts.common import VIDEO_EXTENSIONS, Missing, only_file
from vidscale.data.layouts.registry import Split, register_layout


@dataclass(frozen=True)
class _KineticsRow:
    lineno: int
    label: str
    youtube_id: str
    start: int
    end: int


def _read_kinetics_csv(path: Path) -> list[_KineticsRow]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        needed = {"label", "youtube_id", "time_start", "time_end"}
        if reader.fieldnames is None or not needed <= set(reader.fieldnames):
            raise AnnotationError(
                f"{path}:1: expected a header with {', '.join(sorted(needed))}, "
                f"got {reader.fieldnames}"
            )
        rows = []
        for lineno, row in enumerate(reader, start=2):
            try:
                start, end = int(float(row["time_start"])), int(float(row["time_end"]))
            except (TypeError, ValueError) as err:
                raise AnnotationError(f"{path}:{lineno}: bad time_start/time_end: {err}") from err
            label, yid = (row["label"] or "").strip(), (row["youtube_id"] or "").strip()
            if not label or not yid:
                raise AnnotationError(f"{path}:{lineno}: empty label or youtube_id")
            rows.append(_KineticsRow(lineno, label, yid, start, end))
    return rows


def _index_videos(directory: Path, *, depth: int) -> dict[str, Path]:
    """File stem -> path of every video up to `depth` directories below `directory`.

    One directory scan instead of a stat per candidate name: Kinetics has ~650k videos.
    """
    found: dict[str, Path] = {}
    if not directory.is_dir():
        return found
    pending = [(directory, 0)]
    while pending:
        current, level = pending.pop()
        with os.scandir(current) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir() and level < depth:
                    pending.append((Path(entry.path), level + 1))
                elif entry.is_file():
                    stem, ext = os.path.splitext(entry.name)
                    if ext.lower() in VIDEO_EXTENSIONS:
                        found.setdefault(stem, Path(entry.path))
    return found


# "" = DeepMind's archives (train/validate/test.csv; the CVDF mirror has val.csv);
# "kinetics_" = MMAction2's download_annotations.sh renames; "kinetics-400_"/"kinetics-600_" =
# the ActivityNet crawler's data/; the rest as Kinetics-700 (2019, 2020) copies are named.
_KINETICS_PREFIXES = (
    "",
    "kinetics_",
    "kinetics-400_",
    "kinetics-600_",
    "kinetics-700_",
    "kinetics_700_",
    "kinetics700_2020_",
)


def _kinetics_names(*splits: str) -> tuple[str, ...]:
    """`<prefix><split>.csv` for every distributor's prefix, unprefixed first."""
    return tuple(f"{prefix}{split}.csv" for prefix in _KINETICS_PREFIXES for split in splits)


KINETICS_ANNOTATIONS: dict[str, tuple[str, ...]] = {
    "train": _kinetics_names("train"),
    "val": _kinetics_names("validate", "val", "valid", "validation"),
}
"""The annotation file names `read_layout("kinetics", ...)` accepts, per split."""


@register_layout("kinetics")
def read_kinetics(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    ann_dirs = [ann] if ann is not None else [root / "annotations", root]
    csvs = {
        split: only_file(ann_dirs, names, what=f"Kinetics {split}")
        for split, names in KINETICS_ANNOTATIONS.items()
    }
    rows = {split: _read_kinetics_csv(path) for split, path in csvs.items()}
    classes = sorted({r.label for r in rows["train"]})
    index = {name: i for i, name in enumerate(classes)}
    dirs = {
        "train": ("train", "videos_train"),
        "val": ("val", "validate", "valid", "validation", "videos_val"),
    }
    out: dict[str, list[VideoRecord]] = {}
    for split, split_rows in rows.items():
        roots = [root / d for d in dirs[split] if (root / d).is_dir()] or [root]
        videos: dict[str, Path] = {}
        for d in roots:
            for stem, path in _index_videos(d, depth=2).items():
                videos.setdefault(stem, path)
        out[split] = []
        for r in split_rows:
            where = f"{csvs[split]}:{r.lineno}"
            if r.label not in index:
                raise AnnotationError(
                    f"{where}: class {r.label!r} does not occur in {csvs['train'].name}"
                )
            clip_name = f"{r.youtube_id}_{r.start:06d}_{r.end:06d}"
            video = videos.get(clip_name) or videos.get(r.youtube_id)
            expected = roots[0] / r.label / f"{clip_name}.mp4"
            missing.keep(out[split], video, index[r.label], where=where, expected=expected)
    return classes, out["train"], out["val"]
