"""Charades (Sigurdsson et al., ECCV 2016) as the Allen Institute publishes it, a multi-label
layout: `Charades_v1_classes.txt`, `Charades_v1_train.csv` (the train split) and
`Charades_v1_test.csv` (the validation split) at the root or in `annotations_dir`, videos in
`Charades_v1_480/` or `Charades_v1/` (`data.charades` reads the files).

Each record's `label_set` holds the video's actions and their segments in seconds; a video with
no action is kept, every class negative. Classes are the class file's names, in its order.
"""

from __future__ import annotations

from pathlib import Path

from vidscale.data.annotations import VideoRecord
from vidscale.data.charades import (
    CLASS_FILE,
    SPLIT_FILES,
    find_video_dir,
    read_charades_classes,
    scan_charades,
)
from vidscale.data.label_sets import NO_SINGLE_LABEL, LabelSet
from vidscale.data.layouts.common import Missing
from vidscale.data.layouts.registry import Split, register_layout


@register_layout("charades", multi_label=True)
def read_charades_layout(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    ann = ann or root
    classes = read_charades_classes(ann / CLASS_FILE)
    videos = find_video_dir(root)
    out: dict[str, list[VideoRecord]] = {}
    for split, name in (("train", SPLIT_FILES["train"]), ("val", SPLIT_FILES["test"])):
        found = scan_charades(ann / name, classes=classes, video_dir=videos)
        for lost in found.missing:
            missing.lost(lost.path, where=lost.where)
        out[split] = [
            VideoRecord(v.path, NO_SINGLE_LABEL, LabelSet(v.labels, v.segments))
            for v in found.videos
        ]
    return list(classes.names), out["train"], out["val"]
