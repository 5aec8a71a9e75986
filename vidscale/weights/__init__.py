"""Published weights of other frameworks as vidscale runs (`vidscale import-weights`).

One module per source format holds its key tables and what each model's configs say about its
clips (`mmaction2`, `tsm`, `pyslowfast`, `pytorchvideo`), with the members
`source.CheckpointFormat` lists; `FORMATS` registers them. `pth` reads a checkpoint's tensors
and `c2_pickle` a Caffe2 pickle's arrays without running their code; `rename` maps the `.pyth`
formats' names onto a model; `run_dir` writes the run directory. `import_weights` is the one
entry point; `to_mmaction2` goes the other way (a run as an MMAction2 checkpoint).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from vidscale.config import RunConfig
from vidscale.data.annotations import read_class_names
from vidscale.errors import InputError
from vidscale.models.registry import ModelConfig, build_model
from vidscale.weights import mmaction2, pyslowfast, pytorchvideo, tsm
from vidscale.weights.run_dir import check_out, write_run
from vidscale.weights.source import CheckpointFormat

# Every format `import-weights --format` takes, by name.
FORMATS: dict[str, CheckpointFormat] = {
    mmaction2.FORMAT: mmaction2,
    pytorchvideo.FORMAT: pytorchvideo,
    pyslowfast.FORMAT: pyslowfast,
    tsm.FORMAT: tsm,
}


@dataclass(frozen=True)
class ImportResult:
    """The run written: its directory, checkpoint, model, class count and clip settings."""

    run: str
    checkpoint: str
    model: str
    num_classes: int
    tensors: int
    eval_views: str
    source: str


def import_weights(
    src: Path,
    *,
    fmt: str,
    model: str,
    out: Path,
    classes_file: Path | None = None,
    num_classes: int | None = None,
) -> ImportResult:
    """Import checkpoint `src` of format `fmt` as vidscale model `model` into run `out`.

    The classes are `classes_file`'s names, or `class_0..K-1` for `num_classes` K (default: the
    checkpoint's class count); either must match the checkpoint's classifier. The run records
    the source's clips and input normalisation (`data.mean`/`data.std`, `Source`), which
    predict, eval, export and extract-features then use. Anything that does not fit is an
    `InputError` naming the flag or file.
    """
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: known formats: {', '.join(FORMATS)}")
    form = FORMATS[fmt]
    source = form.check_model(model)
    check_out(Path(out))
    state = form.read(Path(src))
    found = form.classes_in(state)
    classes = _class_names(found, classes_file=classes_file, num_classes=num_classes)
    model_cfg = ModelConfig(
        name=model, num_classes=len(classes), frames=source.eval_clip.frames, dropout=source.dropout
    )
    with torch.device("meta"):
        target = build_model(model_cfg).state_dict()
    try:
        weights = form.convert(state, target, model=model)
    except InputError as err:
        raise InputError(f"{src}: {err}") from None
    cfg = RunConfig(model=model_cfg)
    data = dataclasses.replace(
        cfg.data,
        train_clip=source.train_clip,
        eval_clip=source.eval_clip,
        classes="classes.txt",
        mean=source.mean,  # the normalisation the model was trained with, for every use
        std=source.std,
    )
    cfg = dataclasses.replace(cfg, data=data)
    record = {"format": fmt, "file": str(Path(src).resolve()), "configs": ",".join(source.configs)}
    last = write_run(Path(out), cfg=cfg, classes=classes, weights=weights, source=record)
    clip = source.eval_clip
    return ImportResult(
        run=str(out),
        checkpoint=str(last),
        model=model,
        num_classes=len(classes),
        tensors=len(weights),
        eval_views=f"{clip.num_clips} clips x {clip.num_crops} crops of {clip.frames} frames",
        source=source.configs[0],
    )


def _class_names(found: int, *, classes_file: Path | None, num_classes: int | None) -> list[str]:
    """--classes's names, or class_0..K-1; K must be the checkpoint's class count `found`."""
    if classes_file is not None:
        names, flag = read_class_names(classes_file), f"--classes {classes_file}"
    else:
        k = found if num_classes is None else num_classes
        names, flag = [f"class_{i}" for i in range(k)], f"--num-classes {k}"
    if len(names) != found:
        raise InputError(
            f"{flag}: {len(names)} classes, but the checkpoint's classifier has {found} "
            "(fine-tune on other classes with `vidscale train --set model.init_from=RUN`)"
        )
    return names
