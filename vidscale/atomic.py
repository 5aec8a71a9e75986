"""Atomic file writes: a reader (another rank, a resumed run) sees the old file or the new one.

The content goes to a temporary file in the same directory, is flushed and fsynced, renamed over
the target, and the directory is fsynced so the rename itself survives a power loss or a killed
node. A write that fails or is killed leaves at most a `*.tmp` file, which `remove_stale_tmp`
clears at the next start.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

TMP_SUFFIX = ".tmp"


def fsync_dir(directory: Path) -> None:
    """Make renames and unlinks inside `directory` durable (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems (and all of Windows) refuse fsync on a directory
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Call `write(f)` on a temporary file, then rename it over `path` durably."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=TMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_link(source: Path, path: Path) -> None:
    """Make `path` another name of the finished file `source` (a hard link, renamed into place
    durably): a reader sees the old `path` or `source`'s content, and removing `source` later
    leaves `path` whole. Where the filesystem has no hard links, `source` is copied instead
    (`atomic_write`). The two names share one file: nothing may write to either in place
    (every write here goes through a rename)."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=TMP_SUFFIX, dir=path.parent)
    os.close(fd)
    Path(tmp).unlink()
    try:
        os.link(source, tmp)
    except OSError:  # no hard links here (some network and FUSE filesystems): copy
        with source.open("rb") as src:
            atomic_write(path, lambda f: shutil.copyfileobj(src, f, 1 << 20))
        return
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    data = text.encode()

    def write(f: IO[bytes]) -> None:
        f.write(data)

    atomic_write(path, write)


def atomic_write_json(path: Path, document: Any) -> None:
    """`document` as indented JSON; a reader sees the previous version or this one, whole."""
    atomic_write_text(path, json.dumps(document, indent=2) + "\n")


def remove_stale_tmp(directory: Path) -> list[Path]:
    """Delete the `*.tmp` files a killed write left in `directory`; return what was removed.

    Call it only where no other process is writing (rank 0, at start).
    """
    removed = sorted(directory.glob(f"*{TMP_SUFFIX}")) if directory.is_dir() else []
    for p in removed:
        p.unlink(missing_ok=True)
    if removed:
        fsync_dir(directory)
    return removed
