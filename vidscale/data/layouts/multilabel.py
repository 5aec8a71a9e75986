"""The generic multi-label layout (what `vidscale synth --multi-label` writes): `classes.txt`,
`train.csv` and `val.csv` in the `path,labels` format of `data.multilabel_annotations` (paths
relative to the CSV's directory, labels `;`-separated class names or indices, empty for a video
with no positive class), at the root or in `annotations_dir`.

Each record's `label_set` holds the row's labels, untimed: every clip of a video has all of them.
"""

from __future__ import annotations

from pathlib import Path

from vidscale.data.annotations import VideoRecord, read_class_names
from vidscale.data.label_sets import NO_SINGLE_LABEL, LabelSet
from vidscale.data.layouts.common import Missing
from vidscale.data.layouts.registry import Split, register_layout
from vidscale.data.multilabel_annotations import scan_multilabel_annotations

MULTILABEL = "multilabel"


@register_layout(MULTILABEL, multi_label=True)
def read_multilabel(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    ann = ann or root
    classes = read_class_names(ann / "classes.txt")
    out: dict[str, list[VideoRecord]] = {}
    for split in ("train", "val"):
        found = scan_multilabel_annotations(ann / f"{split}.csv", classes=classes)
        for lost in found.missing:
            missing.lost(lost.path, where=lost.where)
        out[split] = [
            VideoRecord(r.path, NO_SINGLE_LABEL, LabelSet(r.labels)) for r in found.records
        ]
    return classes, out["train"], out["val"]
