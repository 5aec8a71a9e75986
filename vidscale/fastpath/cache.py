"""Where the fast-path probe keeps its decisions: one JSON file per user, keyed by what was timed.

A probe costs seconds to a minute at start-up, and its answer holds for as long as the machine,
the torch build, the model and the per-process shape stay the same, so the decision is stored
under a key naming all of them (`cache_key`). The file maps key -> the decision's record
(`FastPathDecision.record()`), is written atomically (`vidscale.atomic`: a reader sees the old
file or the new one), and is only ever a hint: an unreadable file is reported and replaced, and a
write that fails is reported and the run goes on.

Location (`train.fast_path_cache`): "auto" is `$VIDSCALE_FAST_PATH_CACHE` when set, else
`$XDG_CACHE_HOME/vidscale/fast_path.json` (`~/.cache/...` without XDG_CACHE_HOME); "off" (in
the config field or the variable) disables the cache; anything else is the file's path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vidscale.atomic import atomic_write_text

ENV_VAR = "VIDSCALE_FAST_PATH_CACHE"
OFF = "off"


def cache_file(setting: str, *, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The cache file that `setting` (`train.fast_path_cache`) names; None when disabled."""
    if setting == "auto":
        setting = environ.get(ENV_VAR, "") or "auto"
    if setting == OFF:
        return None
    if setting != "auto":
        return Path(setting).expanduser()
    base = environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "vidscale" / "fast_path.json"


def cache_key(fields: Mapping[str, Any]) -> str:
    """`name=value` pairs in name order, `;`-separated: readable in the file, and equal exactly
    when every field is."""
    return ";".join(f"{name}={fields[name]}" for name in sorted(fields))


def _entries(path: Path) -> dict[str, Any]:
    """The file's entries; {} when it does not exist. Raises ValueError when it is not one of
    ours (bad JSON, not a mapping)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise ValueError(str(err)) from err
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err})") from err
    if not isinstance(entries, dict):
        raise ValueError("not a JSON object")
    return entries


def read_cached(path: Path, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the record stored under `key` or None, a problem to report or None)."""
    try:
        entry = _entries(path).get(key)
    except ValueError as err:
        return None, f"{path} is unreadable ({err}); it will be replaced"
    return (entry if isinstance(entry, dict) else None), None


def write_cached(path: Path, key: str, record: Mapping[str, Any]) -> str | None:
    """Store `record` under `key`, keeping the other entries (an unreadable file is replaced);
    returns a problem to report, or None. Two processes writing at once may lose one entry,
    never the file: the next run with that key measures again."""
    try:
        entries = _entries(path)
    except ValueError:
        entries = {}
    entries[key] = dict(record)
    try:
        atomic_write_text(path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
    except OSError as err:
        return f"cannot write {path} ({err}); the next run will measure again"
    return None
