"""Design guard: torch.distributed is used only inside vidscale/distributed/."""

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vidscale"
PATTERN = re.compile(
    r"^\s*(import torch\.distributed|from torch\.distributed|from torch import distributed)", re.M
)


def test_torch_distributed_only_in_distributed_package() -> None:
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "distributed" not in p.relative_to(PACKAGE).parts[:1] and PATTERN.search(p.read_text())
    ]
    assert offenders == []


def test_models_know_nothing_of_data_or_distribution() -> None:
    for p in (PACKAGE / "models").rglob("*.py"):
        text = p.read_text()
        assert "vidscale.data" not in text and "vidscale.distributed" not in text, p
