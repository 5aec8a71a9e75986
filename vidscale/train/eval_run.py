"""`vidscale eval RUN`: evaluate a run's checkpoints; mean and std over the last N.

The TSM paper reports accuracy as mean +- std over the last 5 epochs' checkpoints (§4,
"Baseline"). Runs as one process or under torchrun (exact sharded evaluation).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from vidscale.config import apply_overrides, load_config
from vidscale.distributed.env import init_distributed
from vidscale.train import builders
from vidscale.train.checkpoint import epoch_checkpoints, load_checkpoint
from vidscale.train.evaluate import evaluate


def evaluate_run(
    run_dir: Path, *, last: int = 1, overrides: list[str] | None = None, data: Path | None = None
) -> dict[str, Any]:
    cfg = load_config(run_dir / "config.json")
    extra = list(overrides or [])
    if data is not None:
        extra.insert(0, f"data.root={data}")
    cfg = apply_overrides(cfg, extra)
    env = init_distributed(cfg.train.device)
    splits = builders.load_splits(cfg)
    cfg = builders.resolve_num_classes(cfg, splits.classes)
    builders.set_threads(cfg, env)
    checkpoints = epoch_checkpoints(run_dir)[-last:]
    if not checkpoints:
        raise FileNotFoundError(f"no epoch checkpoints in {run_dir / 'checkpoints'}")
    fast = builders.fast_path(cfg, env)
    model = builders.build_model(cfg, env, fast)
    loader = builders.build_eval_loader(cfg, env, splits.val)
    prepare = builders.input_preparer(cfg, env)
    autocast = fast.autocast()
    results = []
    for path in checkpoints:
        model.load_state_dict(load_checkpoint(path, map_location=env.device)["model"])
        results.append(
            evaluate(model, loader, prepare=prepare, device=env.device, autocast=autocast)
        )
    top1 = [r.top1 for r in results]
    rows = [
        {"checkpoint": p.name, "top1": r.top1, "top5": r.top5, "count": r.count}
        for p, r in zip(checkpoints, results, strict=True)
    ]
    return {
        "checkpoints": rows,
        "top1_mean": statistics.fmean(top1),
        "top1_std": statistics.stdev(top1) if len(top1) > 1 else 0.0,
        "top5_mean": statistics.fmean(r.top5 for r in results),
        "videos": results[0].count,
    }
