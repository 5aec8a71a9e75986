"""The generic layout: a class list and two `path,label` CSVs (see `annotations`), by default
`classes.txt`, `train.csv` and `val.csv`; the run config names others (`data.classes`,
`data.train_list`, `data.val_list`), passed to `read_layout` as `GenericFiles`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vidscale.data.annotations import (
    HEADER,
    VideoRecord,
    parse_label,
    read_class_names,
    two_column_rows,
)
from vidscale.data.layouts.common import Missing
from vidscale.data.layouts.registry import LayoutReader, Split, register_layout

#: Also the layout whose file names the run config sets (`data.classes`, `data.train_list`, ...).
GENERIC = "generic"


@dataclass(frozen=True)
class GenericFiles:
    """The generic layout's class list and train and validation CSVs. A relative name is looked
    for in the annotation directory (the dataset root unless `read_layout` is given
    `annotations_dir`), an absolute one where it says. A CSV's video paths are relative to the
    CSV's own directory."""

    classes: str | Path = "classes.txt"
    train: str | Path = "train.csv"
    val: str | Path = "val.csv"

    def under(self, directory: Path) -> tuple[Path, Path, Path]:
        """The three files, relative names resolved under `directory`."""
        # `directory / name` is `name` itself when it is absolute.
        return directory / self.classes, directory / self.train, directory / self.val


def _read_generic_csv(path: Path, classes: list[str], missing: Missing) -> list[VideoRecord]:
    """The records of a `path,label` CSV, read as `vidscale prepare` and the annotation checks
    read it (`annotations.two_column_rows`: a byte-order mark, blank rows, the same errors),
    a listed video that is not on disk going to the `missing` policy."""
    index = {name: i for i, name in enumerate(classes)}
    records: list[VideoRecord] = []
    for where, video, label_text in two_column_rows(path, header=HEADER, root=None):
        label = parse_label(label_text, index, where=where)
        missing.keep(records, video, label, where=where, expected=video)
    return records


def generic_reader(files: GenericFiles) -> LayoutReader:
    """The generic layout's reader for `files` (`read_layout` builds one when given
    `generic_files`; the registered reader reads the default names)."""

    def read(root: Path, ann: Path | None, missing: Missing, _split: int, /) -> Split:
        classes_path, train_path, val_path = files.under(ann or root)
        classes = read_class_names(classes_path)
        train = _read_generic_csv(train_path, classes, missing)
        val = _read_generic_csv(val_path, classes, missing)
        return classes, train, val

    return read


#: The registered reader: `classes.txt`, `train.csv` and `val.csv`.
read_generic = register_layout(GENERIC)(generic_reader(GenericFiles()))
