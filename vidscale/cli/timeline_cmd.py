"""`vidscale predict RUN VIDEO --window S`: the timeline of a long video (JSON and a PNG)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vidscale.cli.output import print_result
from vidscale.config import ConfigError


def default_out(video: Path) -> Path:
    """The JSON a timeline goes to without `--out`: `<video stem>.timeline.json` in the
    working directory (a video's own directory may not be writable)."""
    return Path(video.stem + ".timeline.json")


def cmd_predict_window(args: argparse.Namespace, run: Path, checkpoint: str) -> int:
    """Write the timeline to `--out` (default `default_out`) and its plot beside it (same name,
    `.png`); print the segments of equal top class (`--json`: the timeline)."""
    from vidscale.atomic import atomic_write_json
    from vidscale.predict import load_run
    from vidscale.predict_window import plot_timeline, predict_timeline, timeline_as_dict
    from vidscale.run.metrics import progress
    from vidscale.scoring.precision import announce, scoring_arithmetic

    if args.flow_run is not None:
        raise ConfigError(
            "--window: two-stream fusion (--flow-run) is not supported; "
            "predict each stream's timeline on its own"
        )
    out = args.out or default_out(args.video)
    if out.suffix != ".json":
        raise ConfigError(f"--out: {out} must end in .json")
    if not out.resolve().parent.is_dir():
        raise ConfigError(f"--out: {out.parent} is not a directory")
    loaded = load_run(run, checkpoint=checkpoint, device=args.device)
    arithmetic = scoring_arithmetic(args.precision, args.device)
    announce(arithmetic)
    bar = progress(0, enabled=sys.stderr.isatty(), desc="windows")
    bar.unit = "window"

    def advance(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    timeline = predict_timeline(
        args.video,
        loaded,
        window=args.window,
        stride=args.stride or args.window,
        topk=args.topk,
        num_clips=args.clips,
        num_crops=args.crops,
        on_window=advance,
        arithmetic=arithmetic,
    )
    bar.close()
    document = timeline_as_dict(timeline, run=run, checkpoint=loaded.checkpoint)
    atomic_write_json(out, document)
    plot = plot_timeline(timeline, out.with_suffix(".png"))
    lines = [
        f"{s['start']:8.1f}-{s['end']:8.1f} s  {s['label']}  (mean {s['mean_probability']:.1%}"
        f" over {s['windows']} windows)"
        for s in document["segments"]
    ]
    lines.append(f"wrote {out} ({len(timeline.windows)} windows) and {plot}")
    print_result(document, as_json=args.json, text="\n".join(lines))
    return 0
