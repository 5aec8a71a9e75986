"""The peer environments themselves (conftest.py): where CI requires them (`.ci/run` sets
VIDSCALE_REQUIRE_PEERS=1) one that cannot be built fails the proofs instead of skipping them
unseen, and a changed pin rebuilds a cached environment instead of reusing its packages."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.weights.conftest import (
    MMACTION2,
    REQUIRE_PEERS,
    Peer,
    is_ready,
    peer_python,
    peer_root,
    ready_stamp,
    shared_site_dirs,
)

REPO = Path(__file__).resolve().parents[2]
# One test of each peer fixture: the MMAction2 proof of preprocessing, the cheapest one.
PEER_TEST = "tests/weights/test_mmaction2.py::test_preprocessing_equals_mmaction2s"


def offline(env: dict[str, str], cache: Path) -> dict[str, str]:
    """`env` with an empty peer cache and a pip that can reach no package: no index, and
    find-links naming an empty directory in place of the machine's wheel directory."""
    (cache / "no_wheels").mkdir(parents=True, exist_ok=True)
    return {
        **env,
        "VIDSCALE_PEER_CACHE": str(cache),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(cache / "no_wheels"),
    }


def test_a_peer_that_cannot_be_had_skips_unless_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_PEERS, raising=False)
    with pytest.raises(pytest.skip.Exception, match="MMAction2 peer: pip failed"):
        MMACTION2.skip("pip failed")
    monkeypatch.setenv(REQUIRE_PEERS, "1")
    with pytest.raises(pytest.fail.Exception, match="VIDSCALE_REQUIRE_PEERS=1 but the MMAction2"):
        MMACTION2.skip("pip failed")


def run_peer_test(cache: Path, *, required: bool) -> subprocess.CompletedProcess[str]:
    """`PEER_TEST` in a child pytest whose pip can install nothing (`offline`)."""
    env = {k: v for k, v in os.environ.items() if k != REQUIRE_PEERS}
    if required:
        env[REQUIRE_PEERS] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", PEER_TEST],
        cwd=REPO,
        env=offline(env, cache),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_without_pip_the_proof_skips_saying_why(tmp_path: Path) -> None:
    done = run_peer_test(tmp_path, required=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout and "MMAction2 peer: pip install" in done.stdout


@pytest.mark.slow
def test_where_the_peers_are_required_their_absence_fails(tmp_path: Path) -> None:
    done = run_peer_test(tmp_path, required=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 error" in done.stdout and "skipped" not in done.stdout
    assert "VIDSCALE_REQUIRE_PEERS=1 but the MMAction2 peer: pip install" in done.stdout


def stale_env(root: Path, peer: Peer, shared: str) -> Path:
    """A cached environment of `peer` as a build leaves it (a Python and `.ready`), with a
    marker file that a rebuild removes."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to(sys.executable)
    (root / ".ready").write_text(ready_stamp(peer, shared))
    (root / "marker").touch()
    return root


def test_the_ready_stamp_holds_the_pins_and_the_shared_packages(tmp_path: Path) -> None:
    shared = shared_site_dirs()
    root = stale_env(tmp_path / "env", MMACTION2, shared)
    assert is_ready(root, MMACTION2, shared)
    repinned = dataclasses.replace(
        MMACTION2, packages=("mmaction2==1.2.1", *MMACTION2.packages[1:])
    )
    assert not is_ready(root, repinned, shared)
    assert not is_ready(root, MMACTION2, shared + "\n/elsewhere/site-packages")
    (root / "bin" / "python").unlink()
    assert not is_ready(root, MMACTION2, shared)


@pytest.mark.slow
def test_a_changed_pin_rebuilds_the_cached_peer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment built with the old pins is used as it is while they hold; with one pin
    changed it is removed and built again (here, offline, the build then skips at pip)."""
    for key, value in offline({}, tmp_path / "cache").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv(REQUIRE_PEERS, raising=False)
    root = stale_env(peer_root(MMACTION2), MMACTION2, shared_site_dirs())
    assert peer_python(MMACTION2) == root / "bin" / "python" and (root / "marker").exists()
    repinned = dataclasses.replace(
        MMACTION2, packages=("mmaction2==1.2.1", *MMACTION2.packages[1:])
    )
    with pytest.raises(pytest.skip.Exception, match="pip install mmaction2==1.2.1 "):
        peer_python(repinned)
    assert not (root / "marker").exists() and not (root / ".ready").exists()
