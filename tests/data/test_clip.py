"""The one clip-sampling path (`data.clip.sample_views`) over every frame source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.data.flow_demo import write_flow_demo
from vidscale.data.clip import ClipSpec, clip_positions, sample_views, stack_channels
from vidscale.data.dataset import VideoClipDataset
from vidscale.data.layouts import read_layout
from vidscale.data.media.decode import probe
from vidscale.data.prepared.prepare import open_prepared
from vidscale.data.prepared.shard_dataset import ShardClipDataset, StreamingShardDataset
from vidscale.data.sources import FlowSettings, VideoFrames


def flow_spec(**kw: object) -> ClipSpec:
    base = {
        "frames": 3,
        "crop_size": 24,
        "short_side": 32,
        "scales": (1.0, 0.875),
        "flip": True,
        "modality": "flow",
        "flow_stack": 2,
    }
    return ClipSpec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_flow_demo(tmp_path_factory.mktemp("flow_demo"))


class ConstantFlow:
    """A flow source whose every position holds the same quantised (x, y)."""

    def __init__(self, x: int, y: int, *, length: int = 12, size: int = 32) -> None:
        self.length = length
        self.value = np.zeros((size, size, 2), dtype=np.uint8)
        self.value[..., 0], self.value[..., 1] = x, y

    def read(self, indices: np.ndarray) -> np.ndarray:
        return np.stack([self.value for _ in indices])


def test_stacked_flows_become_channels_x_then_y_per_flow() -> None:
    # position p, channel c holds 10 p + c: stack k of segment t reads position 2 t + k
    pixels = np.zeros((6, 2, 2, 2), dtype=np.uint8)
    for p in range(6):
        for c in range(2):
            pixels[p, :, :, c] = 10 * p + c
    stacked = stack_channels(pixels, frames=3)
    assert stacked.shape == (3, 2, 2, 4)
    assert stacked[1, 0, 0].tolist() == [20, 21, 30, 31]  # x2, y2, x3, y3


def test_a_flow_clip_reads_consecutive_stacks_inside_the_video() -> None:
    spec = flow_spec(frames=4, flow_stack=3)
    for seed in range(20):
        positions = clip_positions(15, spec, rng=np.random.default_rng(seed)).reshape(4, 3)
        assert (np.diff(positions, axis=1) == 1).all() and positions.max() < 15
        assert (np.diff(positions[:, 0]) > 0).all()  # one stack per segment, in order
    evaluated = clip_positions(15, spec, rng=None)
    assert np.array_equal(evaluated, clip_positions(15, spec, rng=None))
    short = clip_positions(2, spec, rng=None).reshape(4, 3)
    assert short.max() == 1 and short[:, -1].tolist() == [1, 1, 1, 1]  # repeats the last flow


def test_a_horizontal_flip_negates_the_x_flow_only() -> None:
    seen = set()
    for seed in range(16):
        clip = sample_views(
            ConstantFlow(200, 50), flow_spec(), train=True, rng=np.random.default_rng(seed)
        )
        assert clip.shape == (4, 3, 24, 24)
        x, y = clip[0::2], clip[1::2]
        assert (y == 50).all()
        assert (x == x.flatten()[0]).all()
        seen.add(int(x.flatten()[0]))
    assert seen == {200, 55}  # 255 - 200: dequantises to exactly the negated displacement


def test_rgb_items_are_the_sampled_views_of_their_video(demo: tuple[Path, Path]) -> None:
    data, _ = demo
    records = read_layout("generic", data).train
    spec = ClipSpec(frames=4, crop_size=24, short_side=32, scales=(1.0, 0.875))
    dataset = VideoClipDataset(records, spec, train=True, seed=5)
    dataset.set_epoch(2)
    for index in (0, 3):
        path = records[index].path
        expected = sample_views(
            VideoFrames(path, probe(path)),
            spec,
            train=True,
            rng=np.random.default_rng((5, 2, index, 0)),
        )
        assert torch.equal(dataset[index]["inputs"]["rgb"], expected)


@pytest.mark.parametrize("train", [True, False])
def test_flow_shards_hold_the_flow_computed_from_the_video(
    demo: tuple[Path, Path], train: bool
) -> None:
    """The same item from prepared flow shards and from the raw video (flow computed on the
    fly as `prepare --flow` computes it) differs only by the flow JPEGs' loss."""
    data, prep = demo
    entries = open_prepared(prep, modality="flow").train
    records = read_layout("generic", data).train
    by_path = {str(Path(r.path).absolute()): r for r in records}
    spec = flow_spec(num_clips=1 if train else 2)
    shards = ShardClipDataset(entries, spec, train=train, seed=1)
    videos = VideoClipDataset(
        [by_path[e.path] for e in entries],
        spec,
        train=train,
        seed=1,
        flow=FlowSettings(method="dis", short_side=0),
    )
    diffs = []
    for i in range(len(entries)):
        a, b = shards[i]["inputs"]["flow"], videos[i]["inputs"]["flow"]
        assert a.shape == b.shape == ((4, 3, 24, 24) if train else (2, 4, 3, 24, 24))
        diffs.append((a.float() - b.float()).abs().mean().item())
    assert max(diffs) < 2.0  # quantisation levels: JPEG loss only (flows move ~3-10 levels)


def test_streamed_flow_items_equal_random_access_items(demo: tuple[Path, Path]) -> None:
    _, prep = demo
    entries = open_prepared(prep, modality="flow").train
    spec = flow_spec()
    stream = StreamingShardDataset(
        entries, spec, batch_size=2, seed=4, shuffle_buffer=4, shuffle_initial=2
    )
    stream.set_epoch(1)
    reference = ShardClipDataset(entries, spec, train=True, seed=4)
    reference.set_epoch(1)
    items = [item for batch in stream for item in batch]
    assert len(items) == len(entries)
    for item in items:
        assert torch.equal(item["inputs"]["flow"], reference[item["index"]]["inputs"]["flow"])


def test_a_still_image_is_a_one_frame_clip(tmp_path: Path) -> None:
    import cv2

    from vidscale.data.annotations import VideoRecord
    from vidscale.data.transforms import eval_transform

    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, size=(40, 48, 3), dtype=np.uint8)
    png = tmp_path / "a.png"
    cv2.imwrite(str(png), rgb[:, :, ::-1])
    broken = tmp_path / "b.jpg"
    broken.write_bytes(b"not an image")
    spec = ClipSpec(frames=1, crop_size=32, short_side=32, flip=False)
    records = [VideoRecord(png, 0), VideoRecord(broken, 1)]
    evaluation = VideoClipDataset(records, spec, train=False)
    item = evaluation[0]
    expected = eval_transform(rgb[None], short_side=32, size=32)
    assert torch.equal(item["inputs"]["rgb"], expected)  # PNG is lossless
    assert item["inputs"]["rgb"].shape == (3, 1, 32, 32)
    bad = evaluation[1]
    assert bad["readable"] is False and "image" in bad["skipped"][0][1]
    training = VideoClipDataset(records, spec, train=True, seed=0)
    assert training[1]["index"] == 1 and training[1]["label"] == 0  # substituted by the PNG
