"""`python -m vidscale ...` (also the form used under torchrun: `torchrun ... -m vidscale train`)."""

from vidscale.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
