"""The prepared format: JPEG frames packed per video into large tar shards, plus an index.

Why (DESIGN §4; TSM paper §3b): decoding cost is set by how many frames are decoded, and parallel
file systems serve large sequential reads well but millions of small random reads badly. So each
video is decoded once, its frames are JPEG-encoded and stored as consecutive tar members
`<video_id>/<frame:06d>.jpg` inside ~1 GB shards `shard-00000.tar`. The index (JSON lines, one
`ShardEntry` per video) holds the byte offset and size of every frame's data in its shard, so a
clip costs a few `os.pread` calls inside one contiguous record and decodes exactly the frames
used; streaming reads whole shards front to back.

Shards are plain ustar archives (any tar tool lists them). A shard is written under a temporary
name and renamed only when complete, after its sidecar index `shard-00000.jsonl`: a shard is
complete exactly when both files exist, so an interrupted writer never leaves a half-written
shard that looks complete. Members read from foreign tars are checked: only regular files with
names `<id>/<frame>.jpg` (no absolute paths, no `..`, no links) are accepted; nothing is ever
extracted to disk.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from collections import OrderedDict
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vidscale.atomic import atomic_write_text, fsync_dir
from vidscale.data.label_sets import LabelSet
from vidscale.data.media.decode import DecodeError

try:  # the fastest codec measured (DESIGN §4); OpenCV is the fallback
    import simplejpeg
except ImportError:  # pragma: no cover - depends on the installation
    simplejpeg = None

BLOCK = tarfile.BLOCKSIZE  # 512: ustar header size and data padding unit
MAX_ID_CHARS = 80  # keeps `<id>/<frame>.jpg` under ustar's 100-character name field
SHARD_PATTERN = re.compile(r"^shard-(\d{5,})\.tar$")
MEMBER_PATTERN = re.compile(r"^([A-Za-z0-9_-][A-Za-z0-9._-]*)/(\d{6})\.jpg$")


# JPEG codec ----------------------------------------------------------------------------------


def encode_jpeg(frame_HWC: np.ndarray, *, quality: int) -> bytes:
    """RGB uint8 (H, W, 3) -> JPEG bytes with 4:2:0 chroma (the sources are 4:2:0 video)."""
    if not 1 <= quality <= 100:
        raise ValueError(f"JPEG quality must be in 1..100, got {quality}")
    frame_HWC = np.ascontiguousarray(frame_HWC)
    if simplejpeg is not None:
        return bytes(
            simplejpeg.encode_jpeg(
                frame_HWC, quality=quality, colorspace="RGB", colorsubsampling="420"
            )
        )
    import cv2

    params = [
        cv2.IMWRITE_JPEG_QUALITY,
        quality,
        cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
        cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
    ]
    ok, buf = cv2.imencode(".jpg", frame_HWC[:, :, ::-1], params)
    if not ok:
        raise ValueError("OpenCV could not encode the frame")
    return buf.tobytes()


def decode_jpeg(data: bytes) -> np.ndarray:
    """JPEG bytes -> RGB uint8 (H, W, 3); simplejpeg, else OpenCV, else PIL. Corrupt data
    raises `DecodeError` (the datasets then substitute another sample)."""
    try:
        if simplejpeg is not None:
            return np.asarray(simplejpeg.decode_jpeg(data, colorspace="RGB"))
        return _decode_fallback(data)
    except (ValueError, OSError) as err:
        raise DecodeError(f"corrupt JPEG frame: {err}") from err


def _decode_fallback(data: bytes) -> np.ndarray:
    try:
        import cv2
    except ImportError:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            return np.asarray(img.convert("RGB"))
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("OpenCV could not decode the data")
    return np.ascontiguousarray(bgr[:, :, ::-1])


# member names --------------------------------------------------------------------------------


def safe_video_id(text: str) -> str:
    """A tar-safe id from any name: [A-Za-z0-9._-] only, no leading dot, at most 80 chars."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", text).lstrip(".")[:MAX_ID_CHARS]
    return cleaned or "video"


def member_name(video_id: str, frame: int) -> str:
    name = f"{video_id}/{frame:06d}.jpg"
    if MEMBER_PATTERN.match(name) is None or len(name) >= 100:
        raise ValueError(f"unsafe or too long video id {video_id!r}")
    return name


def parse_member(member: tarfile.TarInfo) -> tuple[str, int]:
    """(video id, frame) of a member; `ValueError` for links, devices, absolute paths, `..`,
    or any name that is not `<id>/<frame:06d>.jpg`."""
    if not member.isreg():
        raise ValueError(f"member {member.name!r} is not a regular file")
    match = MEMBER_PATTERN.match(member.name)
    if match is None:
        raise ValueError(f"member name {member.name!r} is not '<video_id>/<frame:06d>.jpg'")
    return match.group(1), int(match.group(2))


# index ---------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ShardEntry:
    """One prepared video: where its frames are and what it is.

    `offsets[i]`, `sizes[i]`: byte offset and size of frame i's JPEG data in `shard`.
    `label_set`: a multi-label video's positives and segments (None: single-label, `label`).
    """

    id: str
    shard: Path
    offsets: np.ndarray  # int64 (num_frames,)
    sizes: np.ndarray  # int32 (num_frames,): 12 bytes per frame in memory with the offsets
    label: int
    fps: float
    path: str  # the source video
    width: int
    height: int
    label_set: LabelSet | None = None

    @property
    def num_frames(self) -> int:
        return len(self.sizes)

    def to_json(self, root: Path) -> dict[str, Any]:
        return {
            "id": self.id,
            "shard": self.shard.relative_to(root).as_posix(),
            "label": self.label,
            "num_frames": self.num_frames,
            "fps": self.fps,
            "width": self.width,
            "height": self.height,
            "path": self.path,
            "offsets": self.offsets.tolist(),
            "sizes": self.sizes.tolist(),
            **(self.label_set.to_json() if self.label_set is not None else {}),
        }


def entry_from_json(obj: dict[str, Any], *, root: Path, where: str) -> ShardEntry:
    """Parse and check one index line; the shard must lie inside `root`."""
    try:
        rel = Path(str(obj["shard"]))
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"shard path {rel} escapes the dataset directory")
        offsets = np.asarray(obj["offsets"], dtype=np.int64)
        sizes = np.asarray(obj["sizes"], dtype=np.int32)
        if offsets.shape != sizes.shape or len(sizes) != int(obj["num_frames"]) or not len(sizes):
            raise ValueError("offsets, sizes and num_frames disagree")
        return ShardEntry(
            id=str(obj["id"]),
            shard=Path(root) / rel,
            offsets=offsets,
            sizes=sizes,
            label=int(obj["label"]),
            fps=float(obj["fps"]),
            path=str(obj["path"]),
            width=int(obj["width"]),
            height=int(obj["height"]),
            label_set=LabelSet.from_json(obj),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{where}: bad index entry: {err}") from err


def read_index(path: Path, *, root: Path) -> list[ShardEntry]:
    """Entries of a JSON-lines index; errors name the file and line."""
    entries = []
    with Path(path).open() as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: {err.msg}") from err
            entries.append(entry_from_json(obj, root=root, where=where))
    return entries


def write_index(path: Path, entries: Sequence[ShardEntry], *, root: Path) -> None:
    """Write a JSON-lines index atomically (`vidscale.atomic`: a unique temporary file,
    removed if the write fails, renamed into place and the directory synced)."""
    text = "".join(json.dumps(e.to_json(root)) + "\n" for e in entries)
    atomic_write_text(Path(path), text)


# writing -------------------------------------------------------------------------------------


def shard_path(directory: Path, number: int) -> Path:
    return Path(directory) / f"shard-{number:05d}.tar"


def sidecar_path(shard: Path) -> Path:
    return shard.with_suffix(".jsonl")


def record_start(entry: ShardEntry) -> int:
    """Offset of the header of the video's first member: our ustar members have exactly one
    512-byte header block (names stay under 100 characters, so no extended headers)."""
    return int(entry.offsets[0]) - BLOCK


def record_bytes(sizes: Sequence[int]) -> int:
    """Bytes a video takes in a ustar archive: a header block per frame plus padded data."""
    return sum(BLOCK + -(-s // BLOCK) * BLOCK for s in sizes)


class ShardWriter:
    """Appends videos to `directory/shard-NNNNN.tar`, starting a new shard before one would
    exceed `max_bytes` (a video is never split). `close()` finishes the last shard.

    Entries of completed shards accumulate in `entries`; paths in sidecars are relative to
    `root` (the prepared dataset's directory).
    """

    def __init__(self, directory: Path, *, root: Path, max_bytes: int, first_number: int) -> None:
        self.directory = Path(directory)
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.number = first_number
        self.entries: list[ShardEntry] = []
        self._pending: list[ShardEntry] = []
        self._file: io.BufferedWriter | None = None
        self._tar: tarfile.TarFile | None = None
        self.directory.mkdir(parents=True, exist_ok=True)

    def add(
        self,
        video_id: str,
        frames: Sequence[bytes],
        *,
        label: int,
        fps: float,
        path: str,
        width: int,
        height: int,
        label_set: LabelSet | None = None,
    ) -> None:
        if not frames:
            raise ValueError(f"video {video_id} has no frames")
        needed = record_bytes([len(f) for f in frames])
        if self._tar is not None and self._pending and self._tar.offset + needed > self.max_bytes:
            self._finish()
        tar = self._tar or self._start()
        offsets = []
        for i, data in enumerate(frames):
            info = tarfile.TarInfo(member_name(video_id, i))
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
            offsets.append(tar.offset - -(-len(data) // BLOCK) * BLOCK)
        self._pending.append(
            ShardEntry(
                id=video_id,
                shard=shard_path(self.directory, self.number),
                offsets=np.asarray(offsets, dtype=np.int64),
                sizes=np.asarray([len(f) for f in frames], dtype=np.int32),
                label=label,
                fps=fps,
                path=path,
                width=width,
                height=height,
                label_set=label_set,
            )
        )

    def close(self) -> None:
        if self._tar is not None:
            self._finish()

    def _start(self) -> tarfile.TarFile:
        final = shard_path(self.directory, self.number)
        self._file = open(final.with_name(final.name + ".tmp"), "wb")  # noqa: SIM115
        self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.USTAR_FORMAT)  # noqa: SIM115
        return self._tar

    def _finish(self) -> None:
        assert self._tar is not None and self._file is not None
        final = shard_path(self.directory, self.number)
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        # The sidecar first: a tar without its sidecar never exists under the final name.
        write_index(sidecar_path(final), self._pending, root=self.root)
        os.replace(final.with_name(final.name + ".tmp"), final)
        fsync_dir(final.parent)  # the rename itself survives a power loss, as `atomic` does
        self.entries.extend(self._pending)
        self._pending, self._tar, self._file = [], None, None
        self.number += 1


def completed_shards(directory: Path) -> list[Path]:
    """Shards with both the tar and its sidecar, in number order."""
    if not Path(directory).is_dir():
        return []
    found = [p for p in Path(directory).iterdir() if SHARD_PATTERN.match(p.name)]
    return sorted((p for p in found if sidecar_path(p).is_file()), key=lambda p: p.name)


def discard_incomplete(directory: Path) -> list[Path]:
    """Remove temporary files and half-finished shards left by an interrupted writer."""
    removed: list[Path] = []
    if not Path(directory).is_dir():
        return removed
    for p in sorted(Path(directory).iterdir()):
        incomplete = p.name.endswith(".tmp")
        if SHARD_PATTERN.match(p.name) and not sidecar_path(p).is_file():
            incomplete = True
        if p.suffix == ".jsonl" and p.name.startswith("shard-"):
            incomplete = not p.with_suffix(".tar").is_file()
        if incomplete:
            p.unlink()
            removed.append(p)
    return removed


# random access -------------------------------------------------------------------------------


class ShardReader:
    """Frames by `os.pread` of exactly their bytes: each shard opened once per process.

    Wanted frames closer than `gap` bytes are fetched in one read, so a dense clip is one read
    and a TSN clip a few, all inside the video's contiguous record. File descriptors are not
    inherited: a forked or unpickled reader opens its own.
    """

    def __init__(self, *, max_open: int = 64, gap: int = 1 << 16) -> None:
        self.max_open = max_open
        self.gap = gap
        self._fds: OrderedDict[Path, int] = OrderedDict()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"max_open": self.max_open, "gap": self.gap}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def _fd(self, path: Path) -> int:
        if self._pid != os.getpid():  # forked: the parent's descriptors are not ours
            self._fds.clear()
            self._pid = os.getpid()
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
            if len(self._fds) > self.max_open:
                os.close(self._fds.popitem(last=False)[1])
        self._fds.move_to_end(path)
        return fd

    def close(self) -> None:
        if self._pid == os.getpid():
            for fd in self._fds.values():
                os.close(fd)
        self._fds.clear()

    def read_bytes(self, entry: ShardEntry, frames: Sequence[int] | np.ndarray) -> dict[int, bytes]:
        """JPEG bytes of the wanted frames (0-based, any order, repeats allowed)."""
        wanted = sorted({int(i) for i in frames})
        if not wanted or wanted[0] < 0 or wanted[-1] >= entry.num_frames:
            raise DecodeError(f"frames {wanted[:3]}... outside 0..{entry.num_frames - 1}")
        fd = self._fd(entry.shard)
        out: dict[int, bytes] = {}
        for run in self._runs(entry, wanted):
            start = int(entry.offsets[run[0]])
            length = int(entry.offsets[run[-1]] + entry.sizes[run[-1]]) - start
            data = os.pread(fd, length, start)
            if len(data) != length:
                raise DecodeError(f"{entry.shard}: truncated shard (video {entry.id})")
            for i in run:
                lo = int(entry.offsets[i]) - start
                out[i] = data[lo : lo + int(entry.sizes[i])]
        return out

    def _runs(self, entry: ShardEntry, wanted: list[int]) -> list[list[int]]:
        runs = [[wanted[0]]]
        for i in wanted[1:]:
            prev = runs[-1][-1]
            if entry.offsets[i] - (entry.offsets[prev] + entry.sizes[prev]) <= self.gap:
                runs[-1].append(i)
            else:
                runs.append([i])
        return runs

    def read_frames(self, entry: ShardEntry, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Decoded frames at `indices` as (T, H, W, 3) uint8 RGB (like `decode.decode_frames`)."""
        return decode_jpegs(self.read_bytes(entry, indices), indices)


def decode_jpegs(data: dict[int, bytes], indices: Sequence[int] | np.ndarray) -> np.ndarray:
    """(len(indices), H, W, 3) uint8 RGB of the frames `indices` (repeats allowed) from their
    JPEG data by frame; each frame decoded once."""
    decoded = {i: decode_jpeg(data[i]) for i in {int(i) for i in indices}}
    return np.stack([decoded[int(i)] for i in indices])


# streaming -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamedVideo:
    id: str
    frames: list[bytes]  # JPEG data, frame order


def iter_videos(
    path: Path, *, problems: list[tuple[str, str]], start: int = 0, bufsize: int = 1 << 20
) -> Generator[StreamedVideo, None, None]:
    """The videos of a shard from byte `start` (a member header) on, read front to back in one
    sequential pass; the caller stops when it has what it needs.

    Rejected members (unsafe names, links, gaps in a video's frame numbers) and unreadable
    archives are appended to `problems` as (where, reason) and skipped.
    """
    current: str | None = None
    frames: list[bytes] = []
    rejected: set[str] = set()
    with open(path, "rb", buffering=bufsize) as f:
        f.seek(start)
        try:
            with tarfile.open(fileobj=f, mode="r|", bufsize=bufsize) as tar:
                for member in tar:
                    try:
                        video_id, frame = parse_member(member)
                    except ValueError as err:
                        problems.append((f"{path}", str(err)))
                        continue
                    if video_id in rejected:
                        continue
                    if video_id != current:
                        if current is not None and frames:
                            yield StreamedVideo(current, frames)
                        current, frames = video_id, []
                    if frame != len(frames):
                        problems.append((f"{path}:{video_id}", f"frame {frame} out of order"))
                        rejected.add(video_id)
                        current, frames = None, []
                        continue
                    handle = tar.extractfile(member)
                    assert handle is not None  # regular file, checked above
                    frames.append(handle.read())
        except (tarfile.TarError, OSError, EOFError) as err:
            problems.append((str(path), f"unreadable shard: {err}"))
            return
    if current is not None and frames:
        yield StreamedVideo(current, frames)
