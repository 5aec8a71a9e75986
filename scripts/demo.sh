#!/usr/bin/env bash
# Quick start, command 1: set everything up, write the built-in demo dataset (real H.264 files),
# train TSM on 2 processes with torchrun (gloo on CPU, NCCL on GPU), then the same recipe with TSN
# (no temporal shift) for comparison, and print both results.
#   NPROC=2 (processes), DEMO_DATA=demo_data, RUNS=runs, SKIP_TSN=1 to train TSM only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
NPROC=${NPROC:-2}
DATA=${DEMO_DATA:-demo_data}
RUNS=${RUNS:-runs}
[ -f "$DATA/classes.txt" ] || vidscale synth --out "$DATA"
run() {  # recipe run-name
  rm -rf "$RUNS/$2"
  torchrun --standalone --nproc_per_node "$NPROC" -m vidscale train \
    --recipe "$1" --data "$DATA" --out "$RUNS/$2"
}
run demo_tsm_r18_8f_b32_e12 demo_tsm
[ "${SKIP_TSN:-0}" = 1 ] || run demo_tsn_r18_8f_b32_e12 demo_tsn
python - "$RUNS" <<'PY'
import json, sys, pathlib
runs = pathlib.Path(sys.argv[1])
print(f"\n{'run':10s} {'model':14s} {'val top-1':>9s} {'chance':>7s} {'minutes':>8s} {'clips/s':>8s} {'data wait':>9s} {'skipped':>7s}")
for name in ("demo_tsm", "demo_tsn"):
    p = runs / name / "summary.json"
    if p.exists():
        s = json.loads(p.read_text())
        print(f"{name:10s} {s['model']:14s} {s['val_top1']:9.1f} {s['chance_top1']:7.1f} "
              f"{s['wall_seconds'] / 60:8.1f} {s['clips_per_second']:8.1f} "
              f"{100 * s['data_wait_fraction']:8.1f}% {len(s['skipped']):7d}")
PY
