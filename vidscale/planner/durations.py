"""Durations as `vidscale plan` reads (`--target 1h30m`) and writes them (`49h 55m`)."""

from __future__ import annotations

import math
import re

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str) -> float:
    """Seconds in `text`: `15m`, `1h30m`, `10m9s`, `1.5h`, `2d`, or plain seconds (`900`)."""
    cleaned = text.strip().lower().replace(" ", "")
    try:
        seconds = float(cleaned)
    except ValueError:
        parts = _DURATION.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise ValueError(f"expected a duration like 15m, 1h30m or 90s, got {text!r}") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"expected a positive duration, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """`49h 55m`, `14m 13s`, `9.5s` (hours and minutes above an hour, as Table 3 writes)."""
    if seconds >= 3600:
        hours, rest = divmod(round(seconds / 60), 60)
        return f"{hours}h {rest:02d}m"
    if seconds >= 60:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes}m {rest:02d}s"
    return f"{seconds:.1f}s"
