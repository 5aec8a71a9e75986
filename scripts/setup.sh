#!/usr/bin/env bash
# Create .venv (if missing) and install vidscale with its dependencies.
# torch is installed first, pinned (torch==2.13.0: the CPU wheel on CPU hosts); pyproject.toml
# declares a range (torch>=2.11,<2.14) that the installed 2.13.0 satisfies, so the editable
# install after it adds no other torch. On a GPU host whose Python already has a CUDA torch,
# the venv sees it (--system-site-packages) and keeps it: whatever its version, everything else
# is installed without letting pip resolve torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  if "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m venv --system-site-packages .venv
  else
    "$PY" -m venv .venv
  fi
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
if python -c "import torch" 2>/dev/null; then
  torch_version=$(python -c "import torch; print(torch.__version__)")
else
  python -m pip install -q "torch==2.13.0"
  torch_version=$(python -c "import torch; print(torch.__version__)")
fi
if [[ "$torch_version" == 2.13.0* ]]; then
  python -m pip install -q -e ".[dev]"
else
  # Keep the host's torch: install everything else, never letting pip replace torch.
  deps=$(python - <<'PY'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(d for d in p["dependencies"] + p["optional-dependencies"]["dev"] if not d.startswith("torch")))
PY
)
  echo "$deps" | xargs python -m pip install -q
  python -m pip install -q --no-deps -e .
fi
python -c "import torch, av, vidscale; print(f'vidscale {vidscale.__version__}, torch {torch.__version__}, PyAV {av.__version__}')"
