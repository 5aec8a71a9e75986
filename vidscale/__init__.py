"""vidscale: fast, scalable training of video action-recognition models."""

__version__ = "0.1.0"
