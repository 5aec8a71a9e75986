"""The demo generators' video-writing runner: the same bytes whether the jobs run in this
process or in a pool of forked workers."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from vidscale.data.media.decode import probe
from vidscale.data.synthetic.videos import render_video
from vidscale.data.synthetic.writer import POOL_MIN_JOBS, VideoJob, write_videos


def jobs(root: Path) -> list[VideoJob]:
    render = partial(render_video, size=16, num_frames=4, noise=4.0, distractors=1)
    return [
        VideoJob(
            root / f"{k:03d}.mp4", np.random.SeedSequence((9, k)), partial(render, k % 8), 15, 4
        )
        for k in range(POOL_MIN_JOBS)
    ]


def test_pool_and_serial_write_the_same_bytes(tmp_path: Path) -> None:
    write_videos(jobs(tmp_path / "serial"), workers=1)
    write_videos(jobs(tmp_path / "pool"), workers=2)
    serial = sorted((tmp_path / "serial").iterdir())
    assert len(serial) == POOL_MIN_JOBS
    for path in serial:
        assert path.read_bytes() == (tmp_path / "pool" / path.name).read_bytes()
    meta = probe(serial[0])
    assert (meta.num_frames, meta.width, meta.height) == (4, 16, 16)
    assert serial[0].read_bytes() != serial[1].read_bytes()  # each job draws from its own seed
