"""`vidscale info` and the benches' model costs as printed: the counting is
`models.costs` (one meta-device pass: parameters, MACs per layer and in total, Compute/IO as the
TSM paper's Table 1 defines it); this formats it for a person (`format_info`) and for JSON
(`info_as_dict`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vidscale.models.costs import ModelInfo, count_macs, model_info

__all__ = ["ModelInfo", "count_macs", "format_info", "info_as_dict", "model_info"]


def format_info(info: ModelInfo) -> str:
    """Human-readable block, in the units of the paper's Table 1 and Table 2."""
    _, c, t, h, w = info.input_shape
    stages = "  ".join(f"{k}={v}" for k, v in info.stage_frames.items())
    return "\n".join(
        [
            f"model           {info.name}",
            f"parameters      {info.params:,} ({info.params / 1e6:.1f}M)",
            f"MACs / clip     {info.macs / 1e9:.2f}G (FLOPs {info.flops / 1e9:.2f}G)",
            f"input           {t}x{c}x{h}x{w} = {info.input_bytes:,} bytes as uint8",
            f"Compute/IO      {info.compute_per_io / 1e3:.2f}k MACs per input byte",
            f"frames / stage  {stages}",
        ]
    )


def info_as_dict(info: ModelInfo) -> dict[str, Any]:
    """JSON-ready dict (tuples become lists)."""
    out = dataclasses.asdict(info)
    out["input_shape"] = list(info.input_shape)
    return out
