"""Something-Something v2: `labels/{labels,train,validation}.json`, videos
`20bn-something-something-v2/<id>.webm`. Labels are the templates without their placeholder brackets, numbered by `labels.json`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vidscale.data.annotations import AnnotationError, VideoRecord
from vidscale.data.layouts.common import VIDEO_EXTENSIONS, Missing, first_dir, first_file
from vidscale.data.layouts.registry import Split, register_layout


def _json_array_items(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, element) of a JSON array file, so errors can name the line."""
    if not path.is_file():
        raise AnnotationError(f"{path}: annotation file not found")
    text = path.read_text()
    decoder = json.JSONDecoder()
    pos, line = 0, 1

    def skip(pos: int, chars: str) -> int:
        while pos < len(text) and text[pos] in chars:
            pos += 1
        return pos

    pos = skip(pos, " \t\r\n")
    if pos >= len(text) or text[pos] != "[":
        raise AnnotationError(f"{path}:1: expected a JSON array")
    pos = skip(pos + 1, " \t\r\n")
    counted = 0
    while pos < len(text) and text[pos] != "]":
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise AnnotationError(f"{path}:{err.lineno}: {err.msg}") from err
        yield line, item
        pos = skip(pos, " \t\r\n,")


@register_layout("ssv2")
def read_ssv2(root: Path, ann: Path | None, missing: Missing, _split: int) -> Split:
    ann = ann or first_dir(root / "labels", root / "annotations", root)
    prefix = "something-something-v2-"
    label_file = first_file(ann, ["labels.json", f"{prefix}labels.json"])
    try:
        numbered = json.loads(label_file.read_text())
    except json.JSONDecodeError as err:
        raise AnnotationError(f"{label_file}:{err.lineno}: {err.msg}") from err
    if not isinstance(numbered, dict):
        raise AnnotationError(f"{label_file}:1: expected an object {{class name: index}}")
    try:
        by_index = {int(v): k for k, v in numbered.items()}
    except (TypeError, ValueError) as err:
        raise AnnotationError(f"{label_file}: class indices must be integers: {err}") from err
    if sorted(by_index) != list(range(len(numbered))):
        raise AnnotationError(f"{label_file}: class indices are not 0..{len(numbered) - 1}")
    classes = [by_index[i] for i in range(len(by_index))]
    videos = first_dir(root / "20bn-something-something-v2", root / "videos", root)
    out: dict[str, list[VideoRecord]] = {}
    for split, names in (("train", ["train.json"]), ("val", ["validation.json"])):
        path = first_file(ann, [*names, prefix + names[0]])
        out[split] = []
        for lineno, item in _json_array_items(path):
            where = f"{path}:{lineno}"
            if not isinstance(item, dict) or "id" not in item or "template" not in item:
                raise AnnotationError(f"{where}: expected an object with 'id' and 'template'")
            # Labels are templates without the placeholder brackets.
            name = str(item["template"]).replace("[", "").replace("]", "")
            if name not in numbered:
                raise AnnotationError(f"{where}: template {name!r} is not in {label_file.name}")
            vid = str(item["id"])
            video = _with_extension(videos / vid)
            missing.keep(
                out[split], video, int(numbered[name]), where=where, expected=videos / f"{vid}.webm"
            )
    return classes, out["train"], out["val"]


def _with_extension(stem: Path) -> Path | None:
    return next(
        (p for ext in VIDEO_EXTENSIONS if (p := stem.with_name(stem.name + ext)).is_file()), None
    )
