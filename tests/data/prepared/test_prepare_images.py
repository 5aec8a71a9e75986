"""`prepare` on image layouts built of real files: one-frame records equal to the (resized) image,
JPEGs kept byte for byte when they need nothing, the rest re-encoded, bad files skipped and
reported, resume, parallel workers, and the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import simplejpeg

from tests.data.layouts.test_image_layouts import (
    SORTED,
    VAL_LABELS,
    map_clsloc,
    solution_csv,
    write,
)
from vidscale.cli import main
from vidscale.data.layouts import LayoutSplits, read_layout
from vidscale.data.prepared.encode import jpeg_frame, resize_short_side
from vidscale.data.prepared.prepare import PrepareError, open_prepared, prepare_dataset
from vidscale.data.prepared.shards import ShardEntry, ShardReader, decode_jpeg, encode_jpeg

QUIET: dict[str, Any] = {"workers": 1, "progress": False}
SHORT, QUALITY = 24, 85


def pixels(height: int, width: int, seed: int) -> np.ndarray:
    """Smooth RGB content (JPEG keeps it well) that differs per seed."""
    y, x = np.mgrid[0:height, 0:width]
    k = np.random.default_rng(seed).integers(1, 7, 3)
    rgb = np.stack([x * k[0] * 3 + y, y * k[1] * 4, (x + y) * k[2] * 2], axis=-1) % 256
    return rgb.astype(np.uint8)


def png_bytes(rgb: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", rgb[:, :, ::-1])
    assert ok
    return data.tobytes()


def progressive_bytes(rgb: np.ndarray) -> bytes:
    params = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1, cv2.IMWRITE_JPEG_QUALITY, 90]
    ok, data = cv2.imencode(".jpg", rgb[:, :, ::-1], params)
    assert ok
    return data.tobytes()


def baseline(rgb: np.ndarray) -> bytes:
    return encode_jpeg(rgb, quality=90)


def with_trailing_bytes(jpeg: bytes) -> bytes:
    """Stray bytes before the end marker, as some cameras write: libjpeg warns, the image is whole."""
    damaged = jpeg[:-2] + b"junk" * 4 + jpeg[-2:]
    with pytest.raises(ValueError, match="extraneous bytes"):  # strict decoders reject it
        simplejpeg.decode_jpeg(damaged, colorspace="RGB")
    return damaged


# name -> (bytes, the RGB a correct decode of the file gives, stored as is?); None: unreadable
Source = tuple[bytes, np.ndarray | None, bool]


def jpeg_pixels(data: bytes) -> np.ndarray:
    return np.asarray(simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False))


def train_sources() -> dict[str, dict[str, Source]]:
    small, big = baseline(pixels(20, 30, 1)), baseline(pixels(40, 60, 2))
    gray = np.ascontiguousarray(pixels(26, 28, 3)[:, :, :1])
    gray_jpeg = simplejpeg.encode_jpeg(gray, quality=90, colorspace="GRAY")
    trailing = with_trailing_bytes(baseline(pixels(22, 24, 4)))
    png, progressive = pixels(30, 26, 5), progressive_bytes(pixels(24, 24, 6))
    plain = baseline(pixels(18, 24, 7))
    return {
        SORTED[0]: {
            "small_baseline.JPEG": (small, jpeg_pixels(small), True),
            "big.JPEG": (big, jpeg_pixels(big), False),
            "progressive.JPEG": (progressive, jpeg_pixels(progressive), False),
        },
        SORTED[1]: {
            "gray.JPEG": (gray_jpeg, jpeg_pixels(gray_jpeg), False),
            # ImageNet ships a PNG named .JPEG (n02105855_2933.JPEG)
            "disguised_png.JPEG": (png_bytes(png), png, False),
            "trailing.JPEG": (trailing, jpeg_pixels(trailing), False),
        },
        SORTED[2]: {
            "plain.JPEG": (plain, jpeg_pixels(plain), True),
            "truncated.JPEG": (baseline(pixels(40, 40, 8))[:300], None, False),
            "notes.JPEG": (b"these are notes, not an image\n", None, False),
        },
    }


BAD = {"truncated.JPEG", "notes.JPEG"}


def expected_frame(rgb: np.ndarray) -> np.ndarray:
    """What a re-encoded frame decodes to: the resized pixels through JPEG at QUALITY."""
    return decode_jpeg(encode_jpeg(resize_short_side(rgb, SHORT), quality=QUALITY))


def build_imagenet(root: Path, val_form: str) -> dict[str, Source]:
    """An ImageNet tree with the train sources above and four validation images in `val_form`;
    returns every file name -> source."""
    everything: dict[str, Source] = {}
    for wnid, files in train_sources().items():
        for name, source in files.items():
            (root / "train" / wnid).mkdir(parents=True, exist_ok=True)
            (root / "train" / wnid / name).write_bytes(source[0])
            everything[name] = source
    for k, wnid in enumerate(VAL_LABELS, start=1):
        data = baseline(pixels(20 + k, 24, 100 + k))
        name = f"ILSVRC2012_val_{k:08d}.JPEG"
        folder = root / "val" / wnid if val_form == "folders" else root / "val"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
        everything[name] = (data, jpeg_pixels(data), True)
    if val_form == "solution":
        write(root / "LOC_val_solution.csv", solution_csv(VAL_LABELS))
    elif val_form == "ground_truth":
        ids = {line.split()[0]: line.split()[1] for line in map_clsloc().splitlines()}
        truth = "".join(f"{ids[w]}\n" for w in VAL_LABELS)
        write(root / "ILSVRC2012_validation_ground_truth.txt", truth)
        write(root / "map_clsloc.txt", map_clsloc())
    return everything


def stored(entry: ShardEntry) -> bytes:
    return ShardReader().read_bytes(entry, [0])[0]


@pytest.mark.parametrize("val_form", ["folders", "solution", "ground_truth"])
def test_imagenet_prepares_one_frame_records_equal_to_the_resized_images(
    tmp_path: Path, val_form: str
) -> None:
    sources = build_imagenet(tmp_path / "imagenet", val_form)
    splits = read_layout("imagenet", tmp_path / "imagenet")
    out = tmp_path / "prep"
    manifest = prepare_dataset(splits, out, short_side=SHORT, quality=QUALITY, **QUIET)
    assert (manifest.counts["train"], manifest.counts["val"]) == (7, 4)
    assert str(manifest).startswith("prepared 7 train + 4 val images (11 frames")

    data = open_prepared(out)
    assert data.classes == SORTED
    for entry in data.train + data.val:
        name = Path(entry.path).name
        source, decoded, verbatim = sources[name]
        assert decoded is not None
        frame = ShardReader().read_frames(entry, [0])[0]
        assert (entry.num_frames, entry.fps) == (1, 1.0)
        assert (entry.height, entry.width) == frame.shape[:2]
        assert min(frame.shape[:2]) == min(SHORT, *decoded.shape[:2])
        if verbatim:
            assert stored(entry) == source, name
            np.testing.assert_array_equal(frame, decoded)
        else:
            assert stored(entry) != source and jpeg_frame(stored(entry)) is not None, name
            np.testing.assert_array_equal(frame, expected_frame(decoded), err_msg=name)
    assert all(data.classes[e.label] == Path(e.path).parent.name for e in data.train)
    labels = {Path(e.path).name: data.classes[e.label] for e in data.val}
    assert labels == {f"ILSVRC2012_val_{k:08d}.JPEG": w for k, w in enumerate(VAL_LABELS, 1)}


def test_corrupt_and_non_image_files_are_skipped_and_reported(tmp_path: Path) -> None:
    build_imagenet(tmp_path / "imagenet", "folders")
    out = tmp_path / "prep"
    splits = read_layout("imagenet", tmp_path / "imagenet")
    manifest = prepare_dataset(splits, out, short_side=SHORT, **QUIET)
    skipped = {Path(path).name: reason for path, reason in manifest.skipped}
    assert set(skipped) == BAD
    assert skipped["truncated.JPEG"].startswith("DecodeError: corrupt JPEG")
    assert skipped["notes.JPEG"].startswith("DecodeError: ")
    saved = json.loads((out / "manifest.json").read_text())
    assert {Path(p).name for p, _ in saved["skipped"]} == BAD
    assert saved["options"]["media"] == "image" and saved["options"]["fps"] is None
    prepared = {Path(e.path).name for e in open_prepared(out).train}
    assert "trailing.JPEG" in prepared and not prepared & BAD


def snapshot(directory: Path) -> dict[str, bytes]:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {str(p.relative_to(directory)): p.read_bytes() for p in files}


def test_resume_keeps_completed_shards_and_prepares_only_new_images(tmp_path: Path) -> None:
    root, out = tmp_path / "imagenet", tmp_path / "prep"
    build_imagenet(root, "folders")
    settings: dict[str, Any] = {"short_side": SHORT, "shard_bytes": 3000, **QUIET}
    prepare_dataset(read_layout("imagenet", root), out, **settings)
    first = snapshot(out / "train")
    assert len([n for n in first if n.endswith(".tar")]) >= 2

    again = prepare_dataset(read_layout("imagenet", root), out, **settings)
    assert snapshot(out / "train") == first  # a finished directory is left as is
    assert again.counts["train"] == 7

    # An interrupted run leaves a shard without its sidecar; a new image arrives meanwhile.
    last = sorted(n for n in first if n.endswith(".jsonl"))[-1]
    (out / "train" / last).unlink()
    (root / "train" / SORTED[0] / "new.JPEG").write_bytes(baseline(pixels(20, 20, 9)))
    resumed = prepare_dataset(read_layout("imagenet", root), out, **settings)
    kept = {n: b for n, b in first.items() if not n.startswith(last[: -len(".jsonl")])}
    now = snapshot(out / "train")
    assert {n: now[n] for n in kept} == kept
    assert resumed.counts["train"] == 8
    assert {Path(e.path).name for e in open_prepared(out).train} >= {"new.JPEG", "big.JPEG"}


def test_workers_give_the_same_shards(tmp_path: Path) -> None:
    root = tmp_path / "imagenet"
    build_imagenet(root, "solution")
    for workers, out in ((1, tmp_path / "one"), (2, tmp_path / "two")):
        prepare_dataset(read_layout("imagenet", root), out, workers=workers, progress=False)
    assert snapshot(tmp_path / "one") == snapshot(tmp_path / "two")


def test_images_refuse_fps_flow_and_a_video_directory(tmp_path: Path) -> None:
    root, out = tmp_path / "imagenet", tmp_path / "prep"
    build_imagenet(root, "folders")
    splits = read_layout("imagenet", root)
    with pytest.raises(ValueError, match="neither fps nor optical flow"):
        prepare_dataset(splits, out, fps=10.0, **QUIET)
    with pytest.raises(ValueError, match="neither fps nor optical flow"):
        prepare_dataset(splits, out, flow="dis", **QUIET)
    prepare_dataset(splits, out, **QUIET)
    as_videos = LayoutSplits(splits.classes, splits.train, splits.val)  # media="video"
    with pytest.raises(PrepareError, match="'media': 'image'"):
        prepare_dataset(as_videos, out, **QUIET)


def test_command_line_synth_images_then_prepare_imagefolder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo, prep = tmp_path / "demo", tmp_path / "prep"
    synth = ["synth", "--images", "--out", str(demo), "--train-per-class", "2"]
    assert main([*synth, "--val-per-class", "1", "--size", "20"]) == 0
    assert "wrote 20 train + 10 val images (10 classes, 20x20" in capsys.readouterr().out
    assert main([*synth, "--frames", "8"]) == 2
    assert "--frames applies to videos" in capsys.readouterr().err
    command = ["prepare", "--layout", "imagefolder", "--root", str(demo), "--out", str(prep)]
    assert main([*command, "--short-side", "16", "--workers", "1", "--no-progress"]) == 0
    assert "prepared 20 train + 10 val images" in capsys.readouterr().out
    data = open_prepared(prep)
    assert len(data.classes) == 10 and len(data.train) == 20
    for entry in data.train + data.val:
        assert (entry.num_frames, entry.fps, entry.width, entry.height) == (1, 1.0, 16, 16)
        assert data.classes[entry.label] == Path(entry.path).parent.name
    assert main([*command, "--fps", "5", "--no-progress"]) == 2
    assert "neither fps nor optical flow" in capsys.readouterr().err
