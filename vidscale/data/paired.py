"""Items of several datasets over the same videos, joined: one item with several named inputs.

Two-stream evaluation reads each video twice, as RGB frames and as optical flow, each stream
through its own dataset (its own storage, clip spec and views). `PairedDataset` joins them on
the source video, so a batch carries `inputs = {"rgb": ..., "flow": ...}` for the same videos.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from vidscale.data.dataset import VideoClipDataset


def video_key(path: str | Path) -> str:
    """The source video a record or prepared entry stands for (prepared entries keep the
    source's absolute path)."""
    return str(Path(path).absolute())


class PairedDataset(Dataset[dict[str, Any]]):
    """The videos every dataset of `datasets` holds, in the first dataset's order.

    Item i merges the datasets' items for the i-th shared video: `inputs` from each (their
    names must differ: one per modality), its label and multi-label targets (which must agree
    across datasets, else a `ValueError` at construction), `skipped` from all, and `readable` only when every dataset
    could read the video. `index` is the position in this dataset. `only_in` lists, per
    dataset name, the videos the others lack (they are not evaluated).
    """

    def __init__(self, datasets: Mapping[str, VideoClipDataset]) -> None:
        if len(datasets) < 2:
            raise ValueError("pairing needs at least two datasets")
        self.datasets = dict(datasets)
        positions = {
            name: {video_key(r.path): i for i, r in enumerate(ds.records)}
            for name, ds in self.datasets.items()
        }
        first = next(iter(self.datasets))
        shared = [k for k in positions[first] if all(k in p for p in positions.values())]
        self.rows = [{name: p[k] for name, p in positions.items()} for k in shared]
        self.only_in = {
            name: sorted(set(p) - set(shared))
            for name, p in positions.items()
            if set(p) - set(shared)
        }
        for row, key in zip(self.rows, shared, strict=True):
            labels = {
                name: (
                    self.datasets[name].records[i].label,
                    self.datasets[name].records[i].label_set,
                )
                for name, i in row.items()
            }
            if len(set(labels.values())) > 1:
                raise ValueError(f"{key}: the datasets disagree on its label: {labels}")
        if not self.rows:
            raise ValueError("the datasets share no video")

    def __len__(self) -> int:
        return len(self.rows)

    def set_epoch(self, epoch: int) -> None:
        for ds in self.datasets.values():
            ds.set_epoch(epoch)

    def __getitem__(self, index: int) -> dict[str, Any]:
        items = [self.datasets[name][i] for name, i in self.rows[index].items()]
        readable = all(it.get("readable", True) for it in items)
        skipped = [s for it in items for s in it["skipped"]]
        inputs: dict[str, Any] = {}
        if readable:
            for it in items:
                inputs.update(it["inputs"])
        else:  # an unreadable pair reports exactly one reason, as an unreadable item does
            skipped = skipped[:1] if skipped else [("?", "unreadable")]
        # Training never pairs, so every dataset labels the video by its whole label set.
        targets = {"targets": items[0]["targets"]} if "targets" in items[0] else {}
        return {
            "inputs": inputs,
            **targets,
            "label": items[0]["label"],
            "index": index,
            "skipped": skipped,
            "readable": readable,
        }
