#!/usr/bin/env bash
# The CUDA-only checks and the GPU benchmarks of multigrid and SlowFast, in one pass, on a host
# with a CUDA torch (its own torch is kept). Results and logs go to $OUT (default gpu_out/).
#   bash scripts/gpu_checks.sh            # tests, then bench multigrid for SlowFast 8x8 and 4x16
# Each step has a time limit, so a slow step cannot take the ones after it down with it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The project's venv where scripts/setup.sh made one (it keeps the host's CUDA torch), else python3.
if [ -x .venv/bin/python ]; then PY=${PYTHON:-.venv/bin/python}; else PY=${PYTHON:-python3}; fi

"$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

echo "== CUDA tests: synchronised BN, multigrid with a synchronised-BN phase"
TESTS=${TESTS:-tests/distributed/test_sync_batchnorm.py tests/train/test_multigrid.py::test_cuda_ranks_synchronise_batchnorm_where_the_batch_shrinks}
# shellcheck disable=SC2086
timeout 240 "$PY" -m pytest -q -p no:cacheprovider -rs $TESTS 2>&1 | tee "$OUT/tests.log"

echo "== bench multigrid: SlowFast-R50 8x8, PySlowFast's K400 schedule"
timeout 200 "$PY" -m vidscale bench multigrid slowfast_r50_k400_8x8_multigrid_b64_e239 \
  --device cuda --repeats "${REPEATS:-3}" --out-json "$OUT/bench_multigrid_slowfast_8x8.json" \
  2>&1 | tee "$OUT/bench_multigrid_slowfast_8x8.log"

echo "== bench multigrid: SlowFast-R50 4x16 on the same schedule"
timeout 200 "$PY" -m vidscale bench multigrid slowfast_r50_k400_8x8_multigrid_b64_e239 \
  --set model.name=slowfast_resnet50_4x16 --device cuda --repeats "${REPEATS:-3}" \
  --out-json "$OUT/bench_multigrid_slowfast_4x16.json" 2>&1 | tee "$OUT/bench_multigrid_slowfast_4x16.log"
