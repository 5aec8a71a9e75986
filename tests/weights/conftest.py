"""The peer environment: MMAction2 1.2 beside vidscale, to build its models for the proofs.

A virtual environment under `${VIDSCALE_PEER_CACHE:-~/.cache/vidscale/peers}/mmaction2-1.2`,
made once and reused. It shares this environment's packages (torch, NumPy, OpenCV, ...) through
a `.pth` file naming this environment's site-packages, so both sides run the same torch, and pip
adds only MMAction2, MMEngine, mmcv-lite and their small pure-Python dependencies (`--no-deps`:
their declared dependencies would pull a second OpenCV and decord, which building models does
not need). The `mmaction2==1.2.0` wheel on PyPI lacks `mmaction/models/localizers/drn`, which
`mmaction/models/localizers/__init__.py` imports, so `import mmaction.models` fails; that one
import is replaced by `DRN = None` (DRN is a temporal-grounding localizer, used by no
recognizer). Where pip cannot install them (no index, no network), the tests that need the
peer skip, saying why. A ready environment has a `.ready` file naming the site-packages it
shares; another one is rebuilt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

PEER_NAME = "mmaction2-1.2"
PEER_PACKAGES = (
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
)
DRN_IMPORT = "from .drn.drn import DRN"
DRN_STUB = "DRN = None  # the PyPI wheel lacks localizers/drn; no recognizer uses it"
INSTALL_TIMEOUT_S = 900


def peer_root() -> Path:
    base = os.environ.get("VIDSCALE_PEER_CACHE") or "~/.cache/vidscale/peers"
    return Path(base).expanduser() / PEER_NAME


def _run(cmd: list[str], what: str) -> None:
    """Run `cmd`; a failure skips the calling test with its last line of output."""
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"MMAction2 peer: {what} took over {INSTALL_TIMEOUT_S} s")
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        pytest.skip(f"MMAction2 peer: {what} failed: {lines[-1]}")


def _stub_drn(site: Path) -> None:
    init = site / "mmaction" / "models" / "localizers" / "__init__.py"
    if (init.parent / "drn").is_dir():
        return
    text = init.read_text()
    if DRN_IMPORT not in text:
        pytest.skip(f"MMAction2 peer: {init} has no {DRN_IMPORT!r} to stub")
    init.write_text(text.replace(DRN_IMPORT, DRN_STUB))


def shared_site_dirs() -> str:
    """This interpreter's site-packages directories (its venv's, and any a `.pth` of it adds,
    as `scripts/setup.sh` adds the host's on a GPU image), one per line, in `sys.path` order."""
    dirs = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    return "\n".join(dict.fromkeys(dirs or [sysconfig.get_paths()["purelib"]]))


def shared_pth_line(shared: str) -> str:
    """A `.pth` line adding `shared`'s directories as site directories: their own `.pth` files
    are read too (a plain path line would add a directory but not what its `.pth` files add)."""
    return f"import site; list(map(site.addsitedir, {shared.splitlines()!r}))"


def build_peer(root: Path, shared: str) -> Path:
    """Make the peer environment at `root` sharing site-packages `shared`; its Python."""
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
        [str(python), "-m", "pip", "install", "--no-deps", "--quiet", *PEER_PACKAGES],
        "pip install " + " ".join(PEER_PACKAGES[:3]),
    )
    _stub_drn(site)
    _run([str(python), "-c", "import mmaction.models"], "import mmaction.models")
    (root / ".ready").write_text(shared + "\n")
    return python


@pytest.fixture(scope="session")
def mmaction2_python() -> Path:
    """The peer environment's Python, built on first use (see the module docstring)."""
    root, shared = peer_root(), shared_site_dirs()
    ready = root / ".ready"
    python = root / "bin" / "python"
    if ready.is_file() and ready.read_text().strip() == shared and python.exists():
        return python
    return build_peer(root, shared)
