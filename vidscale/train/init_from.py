"""`model.init_from=RUN`: start a fresh run's model from another run's trained weights.

AAVG's flow stream starts from the trained RGB stream, conv1 by the mean rule (Cong et al. §V);
the same path fine-tunes a run on another class list or inflates a 2D run into I3D
(`vidscale.models.transfer`). It applies to a run's first start only: a resumed run continues
from its own checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from torch import Tensor, nn

from vidscale.errors import InputError
from vidscale.models.pretrained import InflateInit
from vidscale.models.transfer import TransferReport, transfer_state_dict
from vidscale.run.checkpoint import first_line, load_checkpoint
from vidscale.run.ref import checkpoint_path, locate


def checkpoint_file(ref: str | Path) -> Path:
    """The checkpoint `ref` names: a run directory (its last checkpoint), a checkpoint file
    inside a run, or RUN/NAME with NAME "last", "best" (by validation top-1) or "epoch_0016".
    Anything that is not there is a `FileNotFoundError` naming it."""
    if not str(ref):
        raise FileNotFoundError("no run given to initialise from")
    path = Path(ref)
    if not path.exists() and (path.parent / "config.json").is_file():
        return checkpoint_path(path.parent, path.name)
    run, checkpoint = locate(path)
    return checkpoint_path(run, checkpoint)


def model_weights(path: Path) -> Mapping[str, Tensor]:
    """The model's state dict in training checkpoint `path` (loaded as tensors only, to the
    CPU); a damaged file or one without a model is a `ValueError` naming it."""
    try:
        state = load_checkpoint(path)
    except Exception as err:  # torch.load reports damage as whatever the bytes trigger
        raise InputError(f"{path}: not a readable checkpoint ({first_line(err)})") from err
    weights = state.get("model") if isinstance(state, Mapping) else None
    if not isinstance(weights, Mapping):
        raise InputError(f"{path}: not a training checkpoint (no 'model' state dict)")
    return weights


def initialise_from(
    model: nn.Module, ref: str | Path, *, inflate_init: InflateInit = "centre"
) -> TransferReport:
    """Load run `ref`'s weights (`checkpoint_file`) into `model`, adapted by
    `transfer_state_dict`, and say what was done (`describe`).

    Call it on a freshly built model of a run's first start. A missing run or checkpoint is a
    `FileNotFoundError`; an unreadable checkpoint, or one of another architecture, a
    `ValueError` naming the file and the keys, and `model` is then left as it was.
    """
    path = checkpoint_file(ref)
    weights = model_weights(path)
    try:
        state, report = transfer_state_dict(
            weights, target=model.state_dict(), inflate_init=inflate_init
        )
    except ValueError as err:
        raise InputError(f"{path}: {err}") from None
    model.load_state_dict(state)
    return replace(report, source=str(path))


def normalisation_warning(
    ref: str | Path, *, mean: tuple[float, ...], std: tuple[float, ...]
) -> str | None:
    """A warning when run `ref` was trained on RGB input normalised otherwise than `mean`/`std`
    (an imported PyTorchVideo or PySlowFast run: 0.45 / 0.225): fine-tuning then starts from
    weights that expect other input. None when they agree, or `ref` has no readable config."""
    from vidscale.run.ref import run_config

    try:
        source = run_config(locate(Path(ref))[0]).data
    except (FileNotFoundError, InputError):
        return None
    if tuple(source.mean) == tuple(mean) and tuple(source.std) == tuple(std):
        return None
    return (
        f"warning: model.init_from {ref} was trained on input normalised with mean "
        f"{list(source.mean)}, std {list(source.std)}; this run normalises with mean {list(mean)}, "
        f"std {list(std)} (set data.mean and data.std to keep the source's)"
    )


def describe(report: TransferReport) -> str:
    """One line for the run's log: where the weights came from and what became of them."""
    parts = [f"{len(report.copied)} tensors copied"]
    by_how: dict[str, list[str]] = {}
    for key, how in report.adapted.items():
        by_how.setdefault(how, []).append(key)
    for how, keys in by_how.items():
        parts.append(f"{keys[0]} {how}" if len(keys) == 1 else f"{len(keys)} tensors {how}")
    if report.replaced:
        heads = ", ".join(sorted({key.rsplit(".", 1)[0] + ".*" for key in report.replaced}))
        counts = f" ({report.classes[0]} -> {report.classes[1]} classes)" if report.classes else ""
        parts.append(f"{heads} replaced{counts}")
    if report.new:
        parts.append(f"{len(report.new)} non-local tensors new (identity blocks)")
    origin = f" from {report.source}" if report.source else ""
    return f"initialised{origin}: " + "; ".join(parts)
