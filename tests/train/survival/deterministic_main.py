"""`vidscale` with deterministic CUDA kernels, for a torchrun child whose losses are compared
exactly with another run's: cuDNN's deterministic algorithms, no autotuning, cuBLAS's fixed
workspace. Usage: torchrun ... tests/train/survival/deterministic_main.py train ..."""

from __future__ import annotations

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts

import torch

from vidscale.cli import main

if __name__ == "__main__":
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    raise SystemExit(main())
