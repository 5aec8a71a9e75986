"""When to stop reading a training set that is mostly unreadable.

An unreadable training video is replaced by another (`data.dataset`): a few damaged files in a
large dataset must not stop a long run. A dataset where most files fail is another matter (a
wrong directory, a broken copy, a codec this FFmpeg lacks): the run would train on the few
readable videos over and over. `ReadHealth` watches one process's recent reads (the training
process's, or a loader worker's own) and raises `UnreadableData` once more than
`max_share` of the last `window` reads failed, after at least `min_reads` reads.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from vidscale.errors import InputError

PREPARE_HINT = "`vidscale prepare` lists every unreadable file in its manifest"
NAMED_FILES = 3  # files named in the message; the manifest lists them all


@dataclass(frozen=True)
class UnreadableLimit:
    """The rule (`data.max_unreadable_share`, `data.unreadable_window`,
    `data.unreadable_min_reads`): stop when more than `max_share` of the last `window` reads
    failed, once at least `min_reads` reads were made. `max_share` below 1 makes a dataset
    where every read fails stop after `max(min_reads, window)` reads at the latest."""

    max_share: float = 0.5
    window: int = 64
    min_reads: int = 32

    def __post_init__(self) -> None:
        if not 0.0 < self.max_share < 1.0:
            raise ValueError(f"data.max_unreadable_share must be in (0, 1), got {self.max_share}")
        if self.window < 1 or self.min_reads < 1:
            raise ValueError(
                "data.unreadable_window and data.unreadable_min_reads must be >= 1, got "
                f"{self.window} and {self.min_reads}"
            )


class UnreadableData(InputError):
    """Too many of the recent training reads failed; the message is one line.

    Raised in a loader worker, it reaches the training process re-raised by the DataLoader as
    this type with the worker's traceback for message, whose last line is `module.
    UnreadableData: <message>`: `str()` gives the message alone either way.
    """

    def __str__(self) -> str:
        text = super().__str__()
        head = f"{type(self).__module__}.{type(self).__qualname__}: "
        last = text.rstrip().rpartition("\n")[2]
        return last.removeprefix(head) if last.startswith(head) else text


class ReadHealth:
    """The outcomes of one process's last reads (`UnreadableLimit.window` of them)."""

    def __init__(self, limit: UnreadableLimit) -> None:
        self.limit = limit
        self.reads = 0
        self._recent: deque[tuple[str, str] | None] = deque(maxlen=limit.window)

    def read(self) -> None:
        """A read that gave a clip."""
        self.reads += 1
        self._recent.append(None)

    def failed(self, path: str, reason: str) -> None:
        """A read of `path` that failed; raise `UnreadableData` if the rule is now broken."""
        self.reads += 1
        self._recent.append((path, reason))
        failures = [f for f in self._recent if f is not None]
        if self.reads >= self.limit.min_reads and len(failures) > (
            self.limit.max_share * len(self._recent)
        ):
            raise UnreadableData(self._message(failures))

    def _message(self, failures: list[tuple[str, str]]) -> str:
        first: dict[str, str] = {}
        for path, reason in failures:
            first.setdefault(path, reason)
        names = list(first)
        reason = (first[names[0]].strip().splitlines() or ["?"])[0]
        reason = reason if len(reason) <= 160 else reason[:157] + "..."
        shown = f"{names[0]} ({reason})"
        shown += "".join(f", {n}" for n in names[1:NAMED_FILES])
        if len(names) > NAMED_FILES:
            shown += f" and {len(names) - NAMED_FILES} more"
        return (
            f"training data mostly unreadable: {len(failures)} of the last {len(self._recent)} "
            f"reads failed (more than data.max_unreadable_share={self.limit.max_share:g}): "
            f"{shown}; {PREPARE_HINT}"
        )
