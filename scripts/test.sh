#!/usr/bin/env bash
# Quick start, command 2: set everything up and run the checks and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check vidscale tests
ruff format --check vidscale tests
mypy
python -m pytest -q -rs -p no:cacheprovider "$@"  # -rs: every skip prints its reason
