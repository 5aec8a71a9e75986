"""The kind of CPU a fast-path test runs as, injected: no test depends on the host's CPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from vidscale.fastpath import settings


@pytest.fixture
def bf16_units(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """Call with True or False: this process's CPU then has bf16 units or not, for
    `cpu_has_bf16_units` and everything that asks it (candidates, the hardware rule, resumes)."""

    def set_units(present: bool) -> None:
        monkeypatch.setattr(settings, "cpu_has_bf16_units", lambda: present)

    return set_units
