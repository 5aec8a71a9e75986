#!/usr/bin/env bash
# Download into wheels/ what an offline GPU host needs to install vidscale beside its own torch.
#   bash scripts/gpu_wheels.sh [--python 3.12] [NAME ...]
# By default PyAV and simplejpeg: the requirements a CUDA image usually lacks (it holds torch,
# numpy, OpenCV, matplotlib, tensorboard, tqdm and pytest); name others to add them. Each comes
# at the version range pyproject.toml declares, as a manylinux x86-64 wheel for CPython of the
# given version (the host's, 3.12 by default), without its own dependencies (PyAV has none,
# simplejpeg needs only numpy). Always added: the build backend (setuptools, 1 MB), for a host
# whose own is too old to build the project offline; below 82, since torch 2.11 (a CUDA image's
# torch) requires setuptools<82 and a setuptools in the venv shadows the host's. Bring wheels/ to
# the host; scripts/setup.sh installs from it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
version=3.12
if [ "${1:-}" = --python ]; then version=$2; shift 2; fi
names=("$@")
[ "${#names[@]}" -gt 0 ] || names=(av simplejpeg)
PY=${PYTHON:-python3}
mapfile -t reqs < <(
  "$PY" scripts/host_requirements.py --extra dev --all --only "${names[@]}"
  "$PY" scripts/host_requirements.py --build --all
)
"$PY" -m pip download -q --no-deps -c <(echo "setuptools<82") --only-binary=:all: \
  --implementation cp --python-version "$version" --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d wheels "${reqs[@]}"
ls -l wheels
