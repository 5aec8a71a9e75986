#!/usr/bin/env bash
# Create .venv (if missing) and install vidscale with its dependencies.
# torch is installed first, pinned (torch==2.13.0: the CPU wheel on CPU hosts); pyproject.toml
# declares a range (torch>=2.11,<2.14) that the installed 2.13.0 satisfies, so the editable
# install after it adds no other torch.
# On a host whose Python already has torch (a CUDA image), the venv sees that Python's
# site-packages and keeps its torch, whatever the version: only the requirements the host does
# not satisfy are installed (scripts/host_requirements.py), and pip never resolves torch. The
# host's site-packages are added by a .pth file rather than --system-site-packages, which sees
# only the base interpreter's packages when the host's Python is itself a venv.
# Offline (a wheels/ folder here, or PIP_NO_INDEX=1): everything comes from wheels/ alone; a
# missing requirement with no wheel there is named, and the check at the end says whether
# vidscale still imports.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -d wheels ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/wheels"; fi
case "${PIP_NO_INDEX:-}" in "" | 0 | false | no | off) offline=0 ;; *) offline=1 ;; esac
if [ ! -x .venv/bin/python ]; then
  if "$PY" -c "import torch, pip" 2>/dev/null; then
    # No pip (nor, before Python 3.12, setuptools) of the venv's own: the host's serve, so an
    # old bundled setuptools cannot shadow the host's when the project is built offline.
    "$PY" -m venv --without-pip .venv
    host_sites=$("$PY" -c "import site; print(repr(site.getsitepackages()))")
    venv_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    echo "import site; list(map(site.addsitedir, $host_sites))" >"$venv_site/host-site-packages.pth"
    # torchrun, as torch's own console script would be here: the host's runs the host's Python,
    # which lacks what this venv adds.
    printf '#!/bin/sh\nexec "$(dirname "$0")/python" -m torch.distributed.run "$@"\n' >.venv/bin/torchrun
    chmod +x .venv/bin/torchrun
  else
    "$PY" -m venv .venv
  fi
fi
. .venv/bin/activate
[ "$offline" = 1 ] || python -m pip install -q --upgrade pip
if ! python -c "import torch" 2>/dev/null; then
  python -m pip install -q "torch==2.13.0"
fi
torch_version=$(python -c "import torch; print(torch.__version__)")
if [[ "$torch_version" == 2.13.0* && "$offline" != 1 ]]; then
  python -m pip install -q -e ".[dev]"
else
  # Keep the host's torch: install only what the host lacks, never letting pip resolve torch.
  not_installed=()
  while read -r req; do
    [ -n "$req" ] || continue
    python -m pip install -q "$req" || not_installed+=("$req")
  done < <(python scripts/host_requirements.py --build; python scripts/host_requirements.py --extra dev)
  # No build isolation: offline, pip could not fetch setuptools into an isolated build env
  # (the build requirements were checked, and installed where missing, just above).
  python -m pip install -q --no-deps --no-build-isolation -e .
  if [ "${#not_installed[@]}" -gt 0 ]; then
    echo "not installed (no wheel for them here; what needs them is unavailable): ${not_installed[*]}"
  fi
fi
python -c "import torch, av, vidscale; print(f'vidscale {vidscale.__version__}, torch {torch.__version__}, PyAV {av.__version__}')"
