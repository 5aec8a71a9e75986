"""Datasets over prepared shards: random access (map-style) and streaming (iterable).

Both sample and transform exactly like the raw-video `VideoClipDataset` (`data.clip.sample_views`
over a shard `FrameSource`, the same `(seed, epoch, index, attempt)` random streams and the same
item dict), so
a prepared dataset changes where frames come from, not what a sample is: for the same epoch an
item equals the raw-video item up to JPEG loss, and the streaming item for video `i` equals the
map-style item `i` exactly.

- `ShardClipDataset`: `os.pread` of the clip's frames inside the video's contiguous record
  (a few reads; DESIGN §4). Use with `TrainSampler` / `ExactEvalSampler` like the raw dataset.
- `StreamingShardDataset`: for file systems where random reads are slow (TSM paper §3b: good
  sequential, poor random I/O). Each epoch the shards are put in an order drawn from
  (seed, epoch); their videos, in file order, form one sequence that is cut into contiguous
  ranges, one per (rank, worker). Each range is read front to back and passed through a shuffle
  buffer that starts yielding once it holds `shuffle_initial` clips and grows to
  `shuffle_buffer` by reading two for every one it yields (as WebDataset's `shuffle(bufsize,
  initial)`): waiting for a full buffer stalled every epoch's first batch. Every rank yields
  the same batches (the epoch's requests: sizes and clip shapes, at most `floor(N /
  world_size)` clips; a multigrid phase changes them), and every video appears at most once
  per epoch. Rank, world size and epoch are arguments: nothing here talks to
  `torch.distributed`.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from vidscale.data.annotations import VideoRecord
from vidscale.data.clip import ClipSpec, FrameSource, at_shape, clip_positions, sample_clip
from vidscale.data.dataset import VideoClipDataset
from vidscale.data.epoch_state import SharedInts
from vidscale.data.media.decode import DecodeError
from vidscale.data.prepared.shards import ShardEntry, ShardReader, iter_videos, record_start
from vidscale.data.read_health import UnreadableLimit
from vidscale.data.samplers import BatchRequest, RequestCycle
from vidscale.data.sources import (
    MemoryFrames,
    ShardFlows,
    ShardFrames,
    shard_length,
    shard_positions,
)
from vidscale.data.targets import check_label_sets, clip_span_s, label_fields


class ShardClipDataset(VideoClipDataset):
    """`VideoClipDataset` whose frames come from shards; same items, same randomness.

    A record whose frames cannot be read (corrupt JPEG data, a truncated or missing shard) is
    handled as the raw dataset handles an unreadable video: substituted in training, and in
    evaluation returned as an item with `"readable": False`, `"clip": None` and the record's
    own label, reported under the entry's source `path`.
    """

    def __init__(
        self,
        entries: Sequence[ShardEntry],
        spec: ClipSpec,
        *,
        train: bool,
        seed: int = 0,
        unreadable: UnreadableLimit | None = None,
        reader: ShardReader | None = None,
        num_classes: int = 0,
    ) -> None:
        records = [VideoRecord(Path(e.path), e.label, e.label_set) for e in entries]
        super().__init__(
            records, spec, train=train, seed=seed, unreadable=unreadable, num_classes=num_classes
        )
        self.entries = list(entries)
        self.reader = reader or ShardReader()

    def source(self, index: int, spec: ClipSpec) -> FrameSource:
        """Item `index`'s frames (RGB shards) or flows (a `prepare --flow` directory)."""
        entry = self.entries[index]
        if spec.modality == "flow":
            return ShardFlows(self.reader, entry)
        return ShardFrames(self.reader, entry)

    def frame_rate(self, index: int) -> float:
        """The prepared frames' rate (after any `prepare --fps` resampling)."""
        return self.entries[index].fps


@dataclass(frozen=True)
class _Pending:
    """A sampled clip waiting in the shuffle buffer: the compressed data of the positions it
    reads and its random stream, not yet advanced (`sample_views` draws the same positions
    again, then the augmentation, exactly as the map-style dataset does)."""

    index: int
    source: MemoryFrames
    rng: np.random.Generator


# The most distinct batch shapes one epoch's requests may cycle through (the multigrid short
# cycle has three); bounds the shared memory that carries the requests to the workers.
MAX_CYCLE = 8
_HEAD = 5  # epoch, start batches, total requests, repeat, cycle length
_FIELDS = 4  # per cycle entry: size, frames (0: the dataset's own spec), crop, max stride


class StreamingShardDataset(IterableDataset):
    """Training clips streamed from shards (see the module docstring), yielded as whole
    batches: use it with `DataLoader(batch_size=None, collate_fn=collate)`.

    An epoch's batches follow its requests (`set_epoch(e, requests=RequestCycle(...))`: sizes
    and clip shapes per batch, e.g. a multigrid phase; by default `batch_size` clips of the
    dataset's spec, as many batches as this rank's share fills). Batch p of the epoch comes
    from the loader's worker p % num_workers, which reads a contiguous range of the epoch's
    order sized by its batches. `set_epoch(e, start_batches=b)` resumes after the rank's first
    `b` batches of epoch `e` (same `num_workers` required). Epoch, start and requests are
    shared with the loader workers, so persistent workers follow `set_epoch`. Multi-label
    entries need `num_classes`; their items carry `"targets"` as the map-style items do.

    A clip with another spec is sampled exactly as the map-style dataset samples item
    `(index, spec)`: each buffered video keeps the frames of every spec its epoch requests.
    """

    def __init__(
        self,
        entries: Sequence[ShardEntry],
        spec: ClipSpec,
        *,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epoch: int = 0,
        shuffle_buffer: int = 256,
        shuffle_initial: int = 32,
        num_classes: int = 0,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        if shuffle_buffer < 1 or shuffle_initial < 1:
            raise ValueError(
                f"shuffle_buffer ({shuffle_buffer}) and shuffle_initial ({shuffle_initial}) "
                "must be >= 1"
            )
        self.entries = list(entries)
        self.num_classes = num_classes
        check_label_sets([e.label_set for e in self.entries], num_classes)
        self.per_rank = len(self.entries) // world_size  # videos each rank may read per epoch
        self.batches = self.per_rank // batch_size
        if self.batches < 1:
            raise ValueError(
                f"{len(self.entries)} videos cannot fill a batch of {batch_size} on "
                f"each of {world_size} ranks"
            )
        self.spec = spec
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        # (epoch, start batches, the epoch's requests): reaches persistent workers
        self._position = SharedInts(_HEAD + MAX_CYCLE * _FIELDS)
        self.set_epoch(epoch)
        self.shuffle_buffer = shuffle_buffer
        self.shuffle_initial = min(shuffle_initial, shuffle_buffer)
        by_shard: dict[Path, list[int]] = {}
        for i, e in enumerate(self.entries):
            by_shard.setdefault(e.shard, []).append(i)
        self.shards = sorted(by_shard)
        self._by_shard = {  # videos in file order: each span is one front-to-back read
            shard: sorted(group, key=lambda i: int(self.entries[i].offsets[0]))
            for shard, group in by_shard.items()
        }

    @property
    def epoch(self) -> int:
        return self._position[0]

    @property
    def start_batches(self) -> int:
        return self._position[1]

    @property
    def requests(self) -> RequestCycle:
        """The current epoch's batch requests (every rank makes the same ones)."""
        total, repeat, length = (self._position[i] for i in range(2, _HEAD))
        cycle = []
        for k in range(length):
            size, frames, crop, stride = (
                self._position[_HEAD + k * _FIELDS + j] for j in range(_FIELDS)
            )
            spec = None if frames == 0 else self._spec(frames, crop, stride)
            cycle.append(BatchRequest(size, spec))
        return RequestCycle(tuple(cycle), total, repeat)

    def set_epoch(
        self, epoch: int, *, start_batches: int = 0, requests: RequestCycle | None = None
    ) -> None:
        """Position the stream at batch `start_batches` of `epoch`, whose batches follow
        `requests` (None: `batch_size` clips of the dataset's spec per batch, `batches` of
        them). Raises ValueError for requests this rank's share cannot fill or that change
        the spec beyond frames, crop and stride."""
        if requests is None:
            requests = RequestCycle((BatchRequest(self.batch_size),), self.batches)
        if len(requests.cycle) > MAX_CYCLE:
            raise ValueError(f"at most {MAX_CYCLE} batch shapes per epoch, got {requests.cycle}")
        clips = requests.clips()
        if clips > self.per_rank:
            raise ValueError(
                f"{requests.total} batches of {requests.cycle} need {clips} clips "
                f"per rank; {len(self.entries)} videos on {self.world_size} ranks give "
                f"{self.per_rank}"
            )
        values = [epoch, start_batches, requests.total, requests.repeat, len(requests.cycle)]
        for r in requests.cycle:
            if r.spec is None:
                values += [r.size, 0, 0, 0]
                continue
            if self._spec(r.spec.frames, r.spec.crop_size, r.spec.max_stride) != r.spec:
                raise ValueError(
                    "a streamed batch may change the clip's frames, crop size and stride only"
                )
            values += [r.size, r.spec.frames, r.spec.crop_size, r.spec.max_stride]
        for i, v in enumerate(values):
            self._position[i] = v

    def _spec(self, frames: int, crop: int, max_stride: int) -> ClipSpec:
        return at_shape(self.spec, frames=frames, crop_size=crop, max_stride=max_stride)

    def __len__(self) -> int:
        """Samples this rank yields in the current epoch."""
        return self.requests.clips()

    def epoch_order(self) -> list[int]:
        """All videos in this epoch's reading order: shards shuffled, videos in file order."""
        rng = np.random.default_rng((self.seed, self.epoch))
        order = [self.shards[i] for i in rng.permutation(len(self.shards))]
        return [i for shard in order for i in self._by_shard[shard]]

    def stream_batches(self, num_workers: int) -> list[list[BatchRequest]]:
        """The epoch's requests by stream: stream w makes batches w, w + num_workers, ..."""
        requests = self.requests
        return [
            [requests[p] for p in range(w, len(requests), num_workers)] for w in range(num_workers)
        ]

    def worker_range(self, stream: int, num_workers: int) -> tuple[int, int]:
        """[start, stop) in `epoch_order()` of this rank's stream `stream` of `num_workers`:
        the clips of the stream's batches."""
        return self._range(stream, self.stream_batches(num_workers))

    def _range(self, stream: int, batches: list[list[BatchRequest]]) -> tuple[int, int]:
        counts = [sum(r.size for r in mine) for mine in batches]
        start = self.rank * sum(counts) + sum(counts[:stream])
        return start, start + counts[stream]

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        # The loader takes batches round-robin starting at worker 0, so batch p of the epoch
        # comes from stream p % num_workers. Resuming at batch b, loader worker w plays
        # stream (w + b) % num_workers: the loader's order then continues the epoch's order.
        stream = (worker + self.start_batches) % num_workers
        batches = self.stream_batches(num_workers)
        start, stop = self._range(stream, batches)
        done = len(range(stream, self.start_batches, num_workers))
        positions = self.epoch_order()[start:stop]
        rng = np.random.default_rng((self.seed, self.epoch, self.rank, stream, 1))
        return self._emit(positions, rng, batches[stream], done=done)

    def _emit(
        self,
        positions: list[int],
        rng: np.random.Generator,
        batches: list[BatchRequest],
        *,
        done: int,
    ) -> Iterator[list[dict[str, Any]]]:
        """This stream's batches after its first `done` ones (read again, decoded never)."""
        if done >= len(batches):  # nothing (left) for this worker
            return
        problems: list[tuple[str, str]] = []
        specs: list[ClipSpec] = []
        for spec in (r.spec or self.spec for r in batches):
            if spec not in specs:
                specs.append(spec)
        pending = self._shuffled(positions, rng, problems, specs)
        with closing(pending):  # stop reading (and close the shard) once the batches are made
            for k, request in enumerate(batches):
                if k < done:  # resuming: reproduce the order, decode nothing
                    for _ in range(request.size):
                        next(pending)
                    continue
                yield self._batch(pending, request.spec or self.spec, request.size, problems)

    def _batch(
        self,
        pending: Iterator[_Pending],
        spec: ClipSpec,
        size: int,
        problems: list[tuple[str, str]],
    ) -> list[dict[str, Any]]:
        """`size` items of `spec` from the buffer; an unreadable clip is replaced by the next."""
        items: list[dict[str, Any]] = []
        while len(items) < size:
            item = next(pending)
            entry = self.entries[item.index]
            try:
                clip = sample_clip(item.source, spec, train=True, rng=item.rng)
                span = None
                if entry.label_set is not None and entry.label_set.segments:
                    span = clip_span_s(clip, entry.fps, spec.modality)
            except (DecodeError, ValueError, OSError) as err:
                problems.append((entry.path, f"{type(err).__name__}: {err}"))
                continue
            reports, problems[:] = list(problems), []
            items.append(
                {
                    "inputs": {spec.modality: clip.views},
                    **label_fields(
                        entry.label, entry.label_set, num_classes=self.num_classes, span_s=span
                    ),
                    "index": item.index,
                    "skipped": reports,
                    "readable": True,  # training only: an unreadable video is never yielded
                }
            )
        return items

    def _shuffled(
        self,
        positions: list[int],
        rng: np.random.Generator,
        problems: list[tuple[str, str]],
        specs: list[ClipSpec],
    ) -> Generator[_Pending]:
        """Shuffle-buffered samples; when the range ends short (unreadable data), it is read
        again with fresh augmentation so that every rank still yields its full count."""
        for attempt in itertools.count():
            buffer: list[_Pending] = []
            got = False
            reads = self._read(positions, attempt, problems, specs)
            for pending in reads:
                got = True
                buffer.append(pending)
                if len(buffer) < self.shuffle_initial:
                    continue
                if len(buffer) < self.shuffle_buffer:  # still growing: one extra read
                    extra = next(reads, None)
                    if extra is not None:
                        buffer.append(extra)
                yield _pop_random(buffer, rng)
            while buffer:  # drain before reading again, so repeats come last
                yield _pop_random(buffer, rng)
            if not got:
                raise RuntimeError(f"no readable video in this worker's range: {problems[-3:]}")

    def _read(
        self,
        positions: list[int],
        attempt: int,
        problems: list[tuple[str, str]],
        specs: list[ClipSpec],
    ) -> Iterator[_Pending]:
        """Read the range shard span by shard span, front to back."""
        for shard, group in itertools.groupby(positions, key=lambda i: self.entries[i].shard):
            wanted = {self.entries[i].id: i for i in group}
            first = min(wanted.values(), key=lambda i: int(self.entries[i].offsets[0]))
            videos = iter_videos(shard, problems=problems, start=record_start(self.entries[first]))
            with closing(videos):  # stop reading (and close the shard) once the span is done
                for video in videos:
                    index = wanted.pop(video.id, None)
                    if index is not None:
                        pending = self._sample(index, video.frames, attempt, problems, specs)
                        if pending is not None:
                            yield pending
                    if not wanted:
                        break
            problems.extend(
                (self.entries[i].path, f"not found in {shard}") for i in wanted.values()
            )

    def _sample(
        self,
        index: int,
        frames: list[bytes],
        attempt: int,
        problems: list[tuple[str, str]],
        specs: list[ClipSpec],
    ) -> _Pending | None:
        entry = self.entries[index]
        if len(frames) != entry.num_frames:
            problems.append(
                (entry.path, f"{len(frames)} frames in the shard, index says {entry.num_frames}")
            )
            return None

        # The same stream as VideoClipDataset: (seed, epoch, index, attempt). Copies draw the
        # positions of every spec the clip may be sampled with, to keep only their data; the
        # clip is drawn later from the original.
        def stream() -> np.random.Generator:
            return np.random.default_rng((self.seed, self.epoch, index, attempt))

        modality = self.spec.modality
        length = shard_length(modality, entry.num_frames)
        wanted: set[int] = set()
        for spec in specs:
            positions = clip_positions(length, spec, rng=stream())
            wanted.update(shard_positions(modality, positions).tolist())
        kept = {int(i): frames[int(i)] for i in wanted}
        return _Pending(index, MemoryFrames(kept, length, modality), stream())


def _pop_random(buffer: list[_Pending], rng: np.random.Generator) -> _Pending:
    j = int(rng.integers(len(buffer)))
    buffer[j], buffer[-1] = buffer[-1], buffer[j]
    return buffer.pop()
