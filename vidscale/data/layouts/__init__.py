"""Standard dataset layouts, read as their publishers ship them, converted to `VideoRecord`s.

Every reader returns `LayoutSplits`: the class names in label order, the train and validation
records, and the videos the annotations name but the disk lacks. Label indices are deterministic:
the layout's own numbering where it has one (UCF101 `classInd.txt`, 1-based -> 0-based; SSv2
`labels.json`), else sorted class names (Kinetics, HMDB51). A missing video is an
`AnnotationError` naming the annotation file and line, unless `skip_missing` (then it is listed
in `missing` as `(expected path, "file:line: reason")`): the one missing-file policy
(`common.Missing`), whichever layout and whoever reads it (`splits.read_splits` for a run,
`prepare`). The generic layout's file names can be given (`GenericFiles`: the run config's
`data.classes`, `data.train_list`, `data.val_list`).

One module per family registers its readers (`registry.register_layout`): `generic`,
`kinetics`, `ucf_hmdb` (ucf101, hmdb51), `ssv2`, `images` (imagenet, imagefolder), and the
multi-label ones, `charades` and `multilabel`, whose records carry label sets (`VideoRecord.label_set`, label -1;
docs/design.md, "Multi-label data"). Importing this package
imports them all, so `layout_names()` is complete: the CLI's `--layout` choices, the run
config's validation and `prepare` read it.
"""

from __future__ import annotations

from pathlib import Path

from vidscale.data.annotations import AnnotationError

# Registration order is the order the names are listed in (`--layout` choices, messages).
from vidscale.data.layouts import generic, kinetics, ucf_hmdb, ssv2, images, charades, multilabel  # noqa: F401  # isort: skip
from vidscale.data.layouts.common import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, Missing, check_split
from vidscale.data.layouts.generic import GENERIC, GenericFiles, generic_reader
from vidscale.data.layouts.kinetics import KINETICS_ANNOTATIONS
from vidscale.data.layouts.registry import LAYOUTS_BY_NAME, Layout, LayoutSplits, Media

__all__ = [
    "GENERIC",
    "IMAGE_EXTENSIONS",
    "IMAGE_LAYOUTS",
    "KINETICS_ANNOTATIONS",
    "LAYOUTS",
    "VIDEO_EXTENSIONS",
    "VIDEO_LAYOUTS",
    "GenericFiles",
    "Layout",
    "LayoutSplits",
    "Media",
    "check_layout_name",
    "layout",
    "read_layout",
]

LAYOUTS: tuple[str, ...] = tuple(LAYOUTS_BY_NAME)
IMAGE_LAYOUTS: tuple[str, ...] = tuple(n for n, k in LAYOUTS_BY_NAME.items() if k.media == "image")
VIDEO_LAYOUTS: tuple[str, ...] = tuple(n for n, k in LAYOUTS_BY_NAME.items() if k.media == "video")


def check_layout_name(name: str, *, field: str = "data.layout") -> str:
    """`name` when a layout is registered under it; else a one-line ValueError naming `field`
    and the known names."""
    if name not in LAYOUTS_BY_NAME:
        raise ValueError(f"{field}: unknown layout {name!r}; known: {', '.join(LAYOUTS)}")
    return name


def layout(name: str) -> Layout:
    """The registered layout `name` (ValueError naming the known ones otherwise)."""
    if name not in LAYOUTS_BY_NAME:
        raise ValueError(f"unknown layout {name!r}; known: {', '.join(LAYOUTS)}")
    return LAYOUTS_BY_NAME[name]


def read_layout(
    kind: str,
    root: Path,
    *,
    split: int = 1,
    skip_missing: bool = False,
    annotations_dir: Path | None = None,
    generic_files: GenericFiles | None = None,
) -> LayoutSplits:
    """Read the dataset at `root` laid out as `kind`; `split` selects UCF101/HMDB51's split 1-3.

    `annotations_dir` overrides where the annotation files are looked for. `generic_files`
    names the generic layout's class list and CSVs (default `GenericFiles()`: `classes.txt`,
    `train.csv`, `val.csv`); every other layout has its own names and ignores it. A listed file
    missing on disk is an `AnnotationError` naming file and line, or with `skip_missing` is left
    out and listed in `LayoutSplits.missing`.
    """
    root = Path(root)
    if not root.is_dir():
        raise AnnotationError(f"{root}: dataset root is not a directory")
    ann = Path(annotations_dir) if annotations_dir is not None else None
    found = layout(kind)
    missing = Missing(skip_missing, what=found.media)
    if found.numbered_splits:
        check_split(split)
    read = found.read
    if kind == GENERIC and generic_files is not None:
        read = generic_reader(generic_files)
    classes, train, val = read(root, ann, missing, split)
    return LayoutSplits(
        classes,
        train,
        val,
        missing=missing.items,
        media=found.media,
        multi_label=found.multi_label,
    )
