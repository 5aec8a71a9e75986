"""Session-wide test settings.

`train.amp` / `train.channels_last` = auto decide by a timed probe whose result is cached per
machine. The suite gets a cache of its own, fresh each session: nothing is written to the
user's `~/.cache`, and two runs of one shape inside the session (a run and its resume, or a
run compared with another) read the same decision, whatever the machine's load did to the
probe. Set at import, before any forkserver or torchrun child starts, so children inherit it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

from vidscale.data.synthetic.videos import write_synthetic_dataset

_CACHE_DIR = Path(tempfile.mkdtemp(prefix="vidscale-fast-path-"))
os.environ["VIDSCALE_FAST_PATH_CACHE"] = str(_CACHE_DIR / "fast_path.json")


@pytest.fixture(scope="session")
def netns_ok() -> None:
    """Skip unless two network namespaces and a veth can be made here (root, iproute2; tried
    once per session), saying why."""
    from vidscale.netlab.link import unavailable

    reason = unavailable()
    if reason is not None and os.environ.get("VIDSCALE_REQUIRE_NETNS") == "1":
        pytest.fail(f"VIDSCALE_REQUIRE_NETNS=1 but {reason}")  # CI as root: must not skip unseen
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def tiny_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny demo dataset shared by the training tests (real H.264 files, made once per session)."""
    root = tmp_path_factory.mktemp("tiny_demo")
    write_synthetic_dataset(root, seed=1, train_per_class=2, val_per_class=1, size=32, num_frames=8)
    return root


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `cuda` skip, saying why, where no CUDA device is available."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (scripts/gpu_checks.sh runs -m cuda)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
