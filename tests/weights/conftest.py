"""The peer environments: another framework beside vidscale, to build its models for the proofs.

Each `Peer` is a virtual environment under `${VIDSCALE_PEER_CACHE:-~/.cache/vidscale/peers}/NAME`,
made once and reused. It shares this environment's packages (torch, NumPy, OpenCV, ...) through
a `.pth` file naming this environment's site-packages, so both sides run the same torch, and pip
adds only the peer's packages and their small pure-Python dependencies (`--no-deps`: declared
dependencies would pull a second torch, OpenCV or decord, which building models does not need).
Where pip cannot install them (no index, no network), the tests that need the peer skip, saying
why, unless `VIDSCALE_REQUIRE_PEERS=1` (set by `.ci/run`): then they fail, so CI cannot pass
with the proofs unrun. A ready environment has a `.ready` file naming the site-packages it
shares and the pins it installed (`Peer.packages`); one whose `.ready` says otherwise (a pin
changed, or another environment shared) is rebuilt.

- `mmaction2_python`: MMAction2 1.2, MMEngine, mmcv-lite. The `mmaction2==1.2.0` wheel on PyPI
  lacks `mmaction/models/localizers/drn`, which `mmaction/models/localizers/__init__.py`
  imports, so `import mmaction.models` fails; that one import is replaced by `DRN = None` (DRN
  is a temporal-grounding localizer, used by no recognizer).
- `pytorchvideo_python`: PyTorchVideo 0.1.5 and fvcore, iopath (what importing
  pytorchvideo.models needs). `pytorchvideo/models/head.py` imports `torchvision.ops.RoIAlign` for its detection
  head; where torchvision is absent, a stub module gives a `RoIAlign` that refuses to be built
  (no classifier uses it), rather than installing a torchvision built for another torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
import torch

INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Peer:
    """A peer environment: its directory name, what pip installs (`--no-deps`), a fix-up of
    its site-packages after the install, and the import that proves it works."""

    name: str
    title: str
    packages: tuple[str, ...]
    fix: Callable[[Path, Peer], None]
    probe: str

    def skip(self, why: str) -> NoReturn:
        """Skip the calling test, or fail it where CI requires the peers (see the docstring)."""
        if os.environ.get(REQUIRE_PEERS) == "1":
            pytest.fail(f"{REQUIRE_PEERS}=1 but the {self.title} peer: {why}", pytrace=False)
        pytest.skip(f"{self.title} peer: {why}")


REQUIRE_PEERS = "VIDSCALE_REQUIRE_PEERS"


def _stub_drn(site: Path, peer: Peer) -> None:
    init = site / "mmaction" / "models" / "localizers" / "__init__.py"
    if (init.parent / "drn").is_dir():
        return
    text = init.read_text()
    if DRN_IMPORT not in text:
        peer.skip(f"{init} has no {DRN_IMPORT!r} to stub")
    init.write_text(text.replace(DRN_IMPORT, DRN_STUB))


def _stub_torchvision_ops(site: Path, peer: Peer) -> None:
    python = site_python(site)
    has = subprocess.run([python, "-c", "import torchvision.ops"], capture_output=True, check=False)
    if has.returncode == 0:
        return
    package = site / "torchvision"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text('"""A stub: only what pytorchvideo.models imports."""\n')
    (package / "ops.py").write_text(TORCHVISION_OPS_STUB)
    del peer


DRN_IMPORT = "from .drn.drn import DRN"
DRN_STUB = "DRN = None  # the PyPI wheel lacks localizers/drn; no recognizer uses it"
TORCHVISION_OPS_STUB = """class RoIAlign:  # PyTorchVideo's detection head only; no classifier builds it
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("torchvision.ops stub of the PyTorchVideo peer")
"""

MMACTION2 = Peer(
    name="mmaction2-1.2",
    title="MMAction2",
    packages=(
        "mmaction2==1.2.0",
        "mmengine==0.10.7",
        "mmcv-lite==2.1.0",
        # their pure-Python dependencies, at versions known to import together
        "addict==2.4.0",
        "einops==0.8.2",
        "importlib_metadata==7.2.1",
        "rich==15.0.0",
        "termcolor==3.3.0",
        "yapf==0.43.0",
        "zipp==4.1.2",
    ),
    fix=_stub_drn,
    probe="import mmaction.models",
)
PYTORCHVIDEO = Peer(
    name="pytorchvideo-0.1.5",
    title="PyTorchVideo",
    packages=(
        "pytorchvideo==0.1.5",
        "fvcore==0.1.5.post20221221",
        "iopath==0.1.10",
        # what importing fvcore.nn and iopath needs beyond this environment's packages
        "portalocker==4.4.2",
        "tabulate==0.10.0",
        "termcolor==3.3.0",
    ),
    fix=_stub_torchvision_ops,
    probe="import pytorchvideo.models.hub",
)


def peer_root(peer: Peer = MMACTION2) -> Path:
    base = os.environ.get("VIDSCALE_PEER_CACHE") or "~/.cache/vidscale/peers"
    return Path(base).expanduser() / peer.name


def site_python(site: Path) -> str:
    """The Python of the environment whose site-packages is `site` (lib/pythonX.Y/site-packages)."""
    return str(site.parents[2] / "bin" / "python")


def _run(cmd: list[str], what: str, peer: Peer) -> None:
    """Run `cmd`; a failure skips the calling test with its last line of output."""
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        peer.skip(f"{what} took over {INSTALL_TIMEOUT_S} s")
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        peer.skip(f"{what} failed: {lines[-1]}")


def shared_site_dirs() -> str:
    """This interpreter's site-packages directories (its venv's, and any a `.pth` of it adds,
    as `scripts/setup.sh` adds the host's on a GPU image), one per line, in `sys.path` order."""
    dirs = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    return "\n".join(dict.fromkeys(dirs or [sysconfig.get_paths()["purelib"]]))


def shared_pth_line(shared: str) -> str:
    """A `.pth` line adding `shared`'s directories as site directories: their own `.pth` files
    are read too (a plain path line would add a directory but not what its `.pth` files add)."""
    return f"import site; list(map(site.addsitedir, {shared.splitlines()!r}))"


def build_peer(root: Path, shared: str, peer: Peer = MMACTION2) -> Path:
    """Make `peer`'s environment at `root` sharing site-packages `shared`; its Python."""
    shutil.rmtree(root, ignore_errors=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    python = root / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    # Sorted after the peer's own packages' .pth files: its own packages come first on sys.path.
    (site / "zz_vidscale_shared.pth").write_text(shared_pth_line(shared) + "\n")
    _run(
        [str(python), "-m", "pip", "install", "--no-deps", "--quiet", *peer.packages],
        "pip install " + " ".join(peer.packages[:3]),
        peer,
    )
    peer.fix(site, peer)
    _run([str(python), "-c", peer.probe], peer.probe, peer)
    (root / ".ready").write_text(ready_stamp(peer, shared))
    return python


def ready_stamp(peer: Peer, shared: str) -> str:
    """What a ready environment's `.ready` holds: the site-packages it shares and the pins it
    installed, so that changing either rebuilds it rather than reusing the old packages."""
    return json.dumps({"shared": shared.splitlines(), "packages": list(peer.packages)}) + "\n"


def is_ready(root: Path, peer: Peer, shared: str) -> bool:
    """Whether `root` holds `peer`'s environment built with its current pins, sharing `shared`."""
    ready = root / ".ready"
    if not (ready.is_file() and (root / "bin" / "python").exists()):
        return False
    return ready.read_text() == ready_stamp(peer, shared)


def peer_python(peer: Peer) -> Path:
    """`peer`'s Python, its environment built on first use (see the module docstring)."""
    root, shared = peer_root(peer), shared_site_dirs()
    if is_ready(root, peer, shared):
        return root / "bin" / "python"
    return build_peer(root, shared, peer)


@pytest.fixture(scope="session")
def mmaction2_python() -> Path:
    """MMAction2's peer Python (see the module docstring)."""
    return peer_python(MMACTION2)


@pytest.fixture(scope="session")
def pytorchvideo_python() -> Path:
    """PyTorchVideo's peer Python (see the module docstring)."""
    return peer_python(PYTORCHVIDEO)


PTV_PEER_SCRIPT = Path(__file__).with_name("pytorchvideo_peer.py")
# PyTorchVideo models the proofs build (pytorchvideo_peer.py's requests): SlowFast 8x8 is the
# hub's slowfast_r50; 4x16 is its builder, create_slowfast, with PySlowFast's 4x16 fusion
# (kernel 5, stride α = 8); Slow 8x8 and I3D 8x8 are the hub's slow_r50 and i3d_r50.
PTV_REQUESTS = (
    {"name": "slowfast_resnet50_8x8", "hub": "slowfast_r50", "alpha": 4},
    {
        "name": "slowfast_resnet50_4x16",
        "hub": "create_slowfast",
        "alpha": 8,
        "kwargs": {
            "model_depth": 50,
            "slowfast_fusion_conv_kernel_size": [5, 1, 1],
            "slowfast_fusion_conv_stride": [8, 1, 1],
        },
    },
    {"name": "slow_resnet50_8x8", "hub": "slow_r50", "alpha": 0},
    {"name": "i3d_resnet50_8x8", "hub": "i3d_r50", "alpha": 0},
)
PTV_CLASSES = 7


@pytest.fixture(scope="session")
def pytorchvideo_outputs(
    pytorchvideo_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """PyTorchVideo's checkpoints (NAME.pyth) and float64 logits (NAME_logits.pt) of
    `PTV_REQUESTS` on one random clip of 2 x 16 frames of 64 x 64 (clip_float64.pt)."""
    work = tmp_path_factory.mktemp("pytorchvideo_peer")
    clip = torch.randn(
        2, 3, 16, 64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    torch.save(clip, work / "clip_float64.pt")
    requests = [{"num_classes": PTV_CLASSES, "seed": i, **r} for i, r in enumerate(PTV_REQUESTS)]
    (work / "request.json").write_text(json.dumps(requests))
    done = subprocess.run(
        [str(pytorchvideo_python), str(PTV_PEER_SCRIPT), str(work)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return work
