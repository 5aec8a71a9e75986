#!/usr/bin/env bash
# The GPU acceptance run: one pass on a host with one CUDA GPU and its own CUDA torch (kept).
#   bash scripts/gpu_checks.sh                 # on the GPU host; results in $OUT (gpu_out/)
#   DRY_RUN=1 bash scripts/gpu_checks.sh       # the same steps on the CPU, tiny shapes, fp32
# Steps, each under `timeout` (limits sum to 9 minutes): setup (scripts/setup.sh: a .venv that
# keeps the host's torch), tests (every test marked `cuda`; one skipped fails the run), throughput
# (`bench throughput`: TSM, TSN, I3D 3x1x1 / 3x3x3, SlowFast 8x8 at the batch that fills the
# card, bf16 + channels-last, eager, and compiled for TSM and SlowFast), shards (`synth` ->
# `prepare` -> `bench shard-train` at TSM's filled batch), profile (`bench profile` of TSM and
# SlowFast), then `bench gpu-report`.
# Every step runs even after one fails; the exit status is non-zero when any step failed or
# timed out, or a CUDA test failed or was skipped. $OUT gets flat: results.json (every figure),
# summary.md (figures beside targets) and one log per step (7 files).
# Offline host: first, where pip can download, `bash scripts/gpu_wheels.sh` (wheels/ for the
# host's Python: PyAV and simplejpeg, which a CUDA image lacks) and bring wheels/ along; setup
# then installs from wheels/ alone. The dry run's setup is offline too (PIP_NO_INDEX=1): it
# passes where the Python that makes the venv ($PYTHON, else python3) has every requirement.
set -uo pipefail  # no -e: each step's status is recorded and the report decides the exit status
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
DRY_RUN=${DRY_RUN:-0}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_checks.XXXXXX")
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" WORK

if [ "$DRY_RUN" = 1 ]; then
  export PIP_NO_INDEX=1
  DEVICE=cpu SETTING=fp32 SIZE=32 FRAMES=8 SHORT=32
  FILL="--batch 2 --max-batch 2 --warmup 1 --steps 1 --peak-size 128 --compile eager"
  SYNTH="--train-per-class 1 --val-per-class 1 --size 32 --frames 8"
  SHARDS="--size 32 --frames 4 --workers 1 --warmup 1 --steps 2"
  PROFILE="--batch 2 --warmup 0"
  LIMITS=(120 120 300 150 120 60)  # setup tests throughput shards profile report: 2 shared cores
else
  DEVICE=cuda SETTING=bf16+cl SIZE=224 FRAMES=0 SHORT=256
  FILL="--batch 8 --max-batch 128 --warmup 3 --steps 10 --compile both --compile-only tsm_resnet50,slowfast_resnet50_8x8"
  SYNTH="--train-per-class 8 --val-per-class 1 --size 256 --frames 48"
  SHARDS="--size 224 --frames 8 --warmup 10 --steps 150"
  PROFILE="--batch 8 --warmup 3"
  LIMITS=(60 100 230 100 40 10)  # throughput and profile keep the rows done by their limit
fi

step() {  # step NAME LIMIT_S COMMAND...: run under `timeout`, log to $OUT/NAME.log, record status
  local name=$1 limit=$2 start rc
  shift 2
  echo "== $name (limit ${limit} s)"
  start=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - start))" "$limit" >>"$WORK/steps.tsv"
  [ "$rc" = 0 ] || { echo "   $name: exit $rc; the end of $OUT/$name.log:"; tail -n 15 "$OUT/$name.log"; }
}

step setup "${LIMITS[0]}" bash scripts/setup.sh
# The project's venv where setup made one (it keeps the host's CUDA torch), else the host's.
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=${PYTHON:-python3}; fi
VS=("$PY" -m vidscale)
export PY

step tests "${LIMITS[1]}" "$PY" -m pytest -q -p no:cacheprovider -rs -m cuda \
  --junitxml="$WORK/tests.xml" tests

# shellcheck disable=SC2086
step throughput "${LIMITS[2]}" "${VS[@]}" bench throughput --device "$DEVICE" --fast-path "$SETTING" \
  --size "$SIZE" --frames "$FRAMES" --fill-batch $FILL --out-json "$WORK/throughput.json"

# TSM's filled batch from the throughput step (8 if that step left none).
BATCH=$("$PY" -c 'import json, sys
try: rows = json.load(open(sys.argv[1]))["rows"]
except OSError: rows = []
print(next((r["batch"] for r in rows if r["model"] == "tsm_resnet50"), 8))' "$WORK/throughput.json")
# shellcheck disable=SC2086
step shards "${LIMITS[3]}" bash -c '"$PY" -m vidscale synth --out "$WORK/videos" '"$SYNTH"' &&
  "$PY" -m vidscale prepare --layout generic --root "$WORK/videos" --out "$WORK/prepared" \
    --short-side '"$SHORT"' --no-progress &&
  "$PY" -m vidscale bench shard-train "$WORK/prepared" --device '"$DEVICE"' --fast-path '"$SETTING"' \
    --batch '"$BATCH"' '"$SHARDS"' --out-json "$WORK/shards.json"'

# shellcheck disable=SC2086
step profile "${LIMITS[4]}" "${VS[@]}" bench profile tsm_resnet50 slowfast_resnet50_8x8 \
  --device "$DEVICE" --fast-path "$SETTING" --size "$SIZE" --frames "$FRAMES" $PROFILE \
  --out-json "$WORK/profile.json"

DRY=()
[ "$DRY_RUN" = 1 ] && DRY=(--dry-run)
timeout "${LIMITS[5]}" "${VS[@]}" bench gpu-report "$WORK" --device "$DEVICE" "${DRY[@]}" \
  --out-json "$OUT/results.json" --out-md "$OUT/summary.md"
rc=$?
cat "$OUT/summary.md" 2>/dev/null
rm -rf "$WORK"
exit "$rc"
