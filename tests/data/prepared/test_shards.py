"""The shard format: JPEG codec, tar layout and index offsets, atomic completion, safe reading."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vidscale.data.media.decode import DecodeError
from vidscale.data.prepared import shards
from vidscale.data.prepared.shards import (
    ShardReader,
    ShardWriter,
    completed_shards,
    decode_jpeg,
    discard_incomplete,
    encode_jpeg,
    iter_videos,
    member_name,
    read_index,
    safe_video_id,
    sidecar_path,
    write_index,
)


def smooth_frame(seed: int, size: int = 32) -> np.ndarray:
    """A smooth colour gradient with a little texture (JPEG-friendly, like real video)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size]
    base = np.stack([x * 6, y * 6, (x + y) * 3], axis=-1).astype(float)
    return (base + rng.normal(0, 2, base.shape)).clip(0, 255).astype(np.uint8)


def payloads(video: int, frames: int) -> list[bytes]:
    """Distinct byte strings of awkward lengths (not multiples of the 512-byte tar block)."""
    return [bytes([video, f]) * (100 + 97 * f) for f in range(frames)]


def test_jpeg_round_trip_error_falls_with_quality() -> None:
    frame = smooth_frame(0)
    errors = []
    for quality in (50, 90, 100):
        back = decode_jpeg(encode_jpeg(frame, quality=quality))
        assert back.shape == frame.shape and back.dtype == np.uint8
        errors.append(np.abs(back.astype(int) - frame).mean())
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1.5
    with pytest.raises(DecodeError, match="corrupt JPEG"):
        decode_jpeg(b"\xff\xd8 not a jpeg")
    with pytest.raises(ValueError, match="quality"):
        encode_jpeg(frame, quality=0)


def write_videos(directory: Path, *, max_bytes: int, counts: list[int]) -> ShardWriter:
    writer = ShardWriter(directory, root=directory.parent, max_bytes=max_bytes, first_number=0)
    for v, n in enumerate(counts):
        meta: dict[str, Any] = {
            "label": v,
            "fps": 25.0,
            "path": f"/src/{v}.mp4",
            "width": 32,
            "height": 24,
        }
        writer.add(f"vid{v}", payloads(v, n), **meta)
    writer.close()
    return writer


def test_writer_splits_shards_and_index_offsets_match_tar(tmp_path: Path) -> None:
    writer = write_videos(tmp_path / "train", max_bytes=6_000, counts=[5, 4, 6])
    tars = completed_shards(tmp_path / "train")
    assert [p.name for p in tars] == ["shard-00000.tar", "shard-00001.tar", "shard-00002.tar"]
    for tar_path in tars:
        entries = read_index(sidecar_path(tar_path), root=tmp_path)
        with tarfile.open(tar_path) as tar:
            members = tar.getmembers()
        assert [m.name for m in members] == [
            member_name(e.id, i) for e in entries for i in range(e.num_frames)
        ]
        offsets = [int(o) for e in entries for o in e.offsets]
        assert [m.offset_data for m in members] == offsets
        assert all(e.shard == tar_path for e in entries)
    assert [e.id for e in writer.entries] == ["vid0", "vid1", "vid2"]
    assert writer.entries[2].num_frames == 6 and writer.entries[2].label == 2


def test_each_finished_shard_is_renamed_into_place_durably(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished shard's rename is followed by an fsync of its directory, as every atomic
    write's is (`atomic.fsync_dir`): after a power loss the shard is there or not, never a
    sidecar naming a tar the directory lost. The fsync itself is recorded, then done."""
    synced: list[tuple[Path, list[str]]] = []
    real = shards.fsync_dir

    def recording(directory: Path) -> None:
        synced.append((directory, sorted(p.name for p in directory.glob("shard-*.tar"))))
        real(directory)

    monkeypatch.setattr(shards, "fsync_dir", recording)
    write_videos(tmp_path / "train", max_bytes=6_000, counts=[5, 4, 6])
    train = tmp_path / "train"
    assert synced == [
        (train, ["shard-00000.tar"]),
        (train, ["shard-00000.tar", "shard-00001.tar"]),
        (train, ["shard-00000.tar", "shard-00001.tar", "shard-00002.tar"]),
    ]


def test_reader_returns_exact_bytes_with_few_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = write_videos(tmp_path / "train", max_bytes=1 << 20, counts=[3, 9])
    entry = writer.entries[1]
    calls: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        calls.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(shards.os, "pread", counting_pread)
    reader = ShardReader(gap=1024)  # consecutive frames are one header (+ padding) apart
    got = reader.read_bytes(entry, [8, 2, 3, 2])
    assert got == {i: payloads(1, 9)[i] for i in (2, 3, 8)}
    assert len(calls) == 2  # frames 2-3 are one contiguous read, frame 8 another
    calls.clear()
    assert ShardReader(gap=1 << 16).read_bytes(entry, [0, 4, 8]).keys() == {0, 4, 8}
    assert len(calls) == 1  # close enough: one read spanning the record
    with pytest.raises(DecodeError, match="outside"):
        reader.read_bytes(entry, [9])
    # a pickled (or forked) reader opens its own descriptors
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.read_bytes(entry, [1]) == {1: payloads(1, 9)[1]}
    reader.close()
    clone.close()


def test_interrupted_shard_never_looks_complete(tmp_path: Path) -> None:
    directory = tmp_path / "train"
    write_videos(directory, max_bytes=1 << 20, counts=[2])
    writer = ShardWriter(directory, root=tmp_path, max_bytes=1 << 20, first_number=1)
    writer.add("late", payloads(7, 3), label=0, fps=1.0, path="/src/late.mp4", width=1, height=1)
    # interrupted here: no close()
    assert (directory / "shard-00001.tar.tmp").is_file()
    assert not (directory / "shard-00001.tar").exists()
    (directory / "shard-00002.jsonl").write_text("")  # a sidecar whose tar never got renamed
    assert [p.name for p in completed_shards(directory)] == ["shard-00000.tar"]
    removed = {p.name for p in discard_incomplete(directory)}
    assert removed == {"shard-00001.tar.tmp", "shard-00002.jsonl"}
    assert sorted(p.name for p in directory.iterdir()) == ["shard-00000.jsonl", "shard-00000.tar"]


def test_video_ids_and_member_names_are_safe() -> None:
    assert safe_video_id("../../etc/passwd") == "_.._etc_passwd"
    assert safe_video_id("v_Archery g01 (1)") == "v_Archery_g01__1_"
    assert safe_video_id("..") == "video"
    assert len(safe_video_id("x" * 300)) == 80
    assert member_name("abc", 7) == "abc/000007.jpg"
    for bad in ("../x", "/abs", "a/b", ".hidden", ""):
        with pytest.raises(ValueError):
            member_name(bad, 0)


def add_member(tar: tarfile.TarFile, name: str, data: bytes, **kind: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in kind.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def test_streaming_rejects_escaping_members_of_foreign_tars(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.tar"
    with tarfile.open(foreign, "w", format=tarfile.GNU_FORMAT) as tar:
        add_member(tar, "good/000000.jpg", b"a")
        add_member(tar, "../evil/000000.jpg", b"x")
        add_member(tar, "/abs/000000.jpg", b"x")
        add_member(tar, "good/000001.jpg", b"b")
        add_member(tar, "link/000000.jpg", b"", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add_member(tar, "hard/000000.jpg", b"", type=tarfile.LNKTYPE, linkname="good/000000.jpg")
        add_member(tar, "gap/000000.jpg", b"c")
        add_member(tar, "gap/000002.jpg", b"d")
        add_member(tar, "gap/000003.jpg", b"e")
        add_member(tar, "last/000000.jpg", b"f")
    problems: list[tuple[str, str]] = []
    videos = list(iter_videos(foreign, problems=problems))
    assert [(v.id, v.frames) for v in videos] == [("good", [b"a", b"b"]), ("last", [b"f"])]
    reasons = " | ".join(reason for _, reason in problems)
    assert "'../evil/000000.jpg'" in reasons and "'/abs/000000.jpg'" in reasons
    assert "not a regular file" in reasons and "frame 2 out of order" in reasons
    assert len(problems) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.tar"]  # nothing extracted


def test_index_round_trip_and_path_checks(tmp_path: Path) -> None:
    writer = write_videos(tmp_path / "train", max_bytes=1 << 20, counts=[2, 3])
    index = tmp_path / "index.jsonl"
    write_index(index, writer.entries, root=tmp_path)
    back = read_index(index, root=tmp_path)
    assert [e.to_json(tmp_path) for e in back] == [e.to_json(tmp_path) for e in writer.entries]
    line = index.read_text().splitlines()[1].replace('"train/shard-00000.tar"', '"../x.tar"')
    index.write_text(index.read_text().splitlines()[0] + "\n" + line + "\n")
    with pytest.raises(ValueError, match=r"index\.jsonl:2: bad index entry: .*escapes"):
        read_index(index, root=tmp_path)


def test_an_index_write_that_fails_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index goes through `vidscale.atomic` like every other file: a write that fails
    (here the rename) removes its temporary file and leaves the old index as it was."""
    index = tmp_path / "index.jsonl"
    index.write_text("old\n")

    def refuse(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        shards.write_index(index, [], root=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.jsonl"]
    assert index.read_text() == "old\n"
