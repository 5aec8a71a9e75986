#!/usr/bin/env bash
# Several nodes on one machine: two torchrun agents, one process each, joined by a c10d
# rendezvous exactly as two nodes are (docs/distributed.md, "Several nodes"), train one recipe. The result
# equals `torchrun --standalone --nproc_per_node 2` of the same recipe, step for step.
#   RECIPE=demo_tsm_r18_8f_b32_e12, DEMO_DATA=demo_data, RUNS=runs, RUN=multinode (run name),
#   PORT (rendezvous port; default: a free one), THREADS (per process; default: half the cores).
#   Arguments go on to `vidscale train`, e.g. `bash scripts/multinode_local.sh --set train.epochs=1`.
# Writes the run to $RUNS/$RUN and each agent's output to $RUNS/$RUN/agent{0,1}.log.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
. .venv/bin/activate
RECIPE=${RECIPE:-demo_tsm_r18_8f_b32_e12}
DATA=${DEMO_DATA:-demo_data}
RUNS=${RUNS:-runs}
OUT=$RUNS/${RUN:-multinode}
PORT=${PORT:-$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
# Each agent sees all the cores (it takes the machine for its node); the two share them here.
THREADS=${THREADS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
[ -f "$DATA/classes.txt" ] || vidscale synth --out "$DATA"
rm -rf "$OUT"
mkdir -p "$OUT"

# --node_rank stays unset: c10d numbers the agents in the order they join and ignores it (torchrun
# warns when it is set), so a fixed number would only promise an order that does not hold. Either
# agent may get group rank 0; the run depends on the ranks, not on which agent holds them.
# is_host: the first agent hosts the rendezvous store and the second only connects, as a head
# node and the others do. Left to guess, both would try to host on a loopback address and the
# loser would connect to whatever listens on the port; a port taken since it was picked now
# fails the first agent instead. --local_addr: the address the rank-0 agent publishes the ranks'
# store under (by default the host's name, which need not resolve). A fresh rendezvous id: a
# launch never joins an earlier one's round. LOGLEVEL=INFO puts each agent's rendezvous result
# (group rank, global ranks, world size) in its log.
ID=multinode-$$-$RANDOM
agent() {  # index (0 hosts the rendezvous), then the arguments for `vidscale train`
  # exec: the background job is torchrun itself, so stopping it stops its worker too.
  local n=$1 host=$(( $1 == 0 ))
  shift
  LOGLEVEL=${LOGLEVEL:-INFO} exec torchrun --nnodes 2 --nproc_per_node 1 \
    --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$PORT" --rdzv_id "$ID" \
    --rdzv_conf "is_host=$host" --local_addr 127.0.0.1 \
    -m vidscale train --recipe "$RECIPE" --data "$DATA" --out "$OUT" \
    --set "train.threads=$THREADS" "$@" >"$OUT/agent$n.log" 2>&1
}
agent 0 "$@" &
pids=($!)
agent 1 "$@" &
pids+=($!)
stop_agents() { kill "${pids[@]}" 2>/dev/null || true; }
trap stop_agents EXIT INT TERM

# Wait for both; the first failure stops the other agent and is the script's status. Left
# alone, the survivor would wait out the rendezvous timeout for a peer that never came, or go
# on training with the rank of a dead agent (the ranks' store lives in one agent only).
for _ in 0 1; do
  status=0
  wait -n || status=$?
  if [ "$status" -ne 0 ]; then
    echo "multinode: an agent ended with exit status $status; stopping the other" >&2
    stop_agents
    wait || true
    grep -h "^vidscale: " "$OUT"/agent*.log | tail -n 5 >&2 || true
    echo "multinode: logs in $OUT/agent0.log and $OUT/agent1.log" >&2
    exit "$status"
  fi
done
trap - EXIT INT TERM
python - "$OUT" <<'PY'
import json, sys, pathlib
s = json.loads((pathlib.Path(sys.argv[1]) / "summary.json").read_text())
print(f"{sys.argv[1]}: {s['model']}, world size {s['world_size']}, val top-1 {s['val_top1']:.1f} "
      f"(chance {s['chance_top1']:.1f}), {s['wall_seconds'] / 60:.1f} min")
PY
