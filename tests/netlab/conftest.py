"""Two namespaces need root and iproute2: the tests that make them take `netns_ok`
(tests/conftest.py), which skips, saying why, without."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from vidscale.netlab.link import PREFIX, namespaces


@pytest.fixture(autouse=True)
def nothing_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test of this package leaves no namespace of its own behind (those this process
    made: another run's on the same host are its own business)."""
    yield
    if "netns_ok" in request.fixturenames:
        left = [ns for ns in namespaces() if ns.startswith(f"{PREFIX}{os.getpid()}-")]
        assert not left, f"namespaces left behind: {left}"
