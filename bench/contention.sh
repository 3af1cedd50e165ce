#!/usr/bin/env bash
# fleetrl beside a busy neighbour: `fleetrl train --config cartpole-ppo` on a fixed budget (no
# early stop, so every run does the same work) alone, beside one busy loop per core, and beside
# a PyTorch process doing matmuls with its default intra-op threads (one per core, spinning in
# OpenMP between ops: what an SB3 or Sample Factory run on the same machine looks like). Per
# run: training env steps/s, wall time, the learner's mean update time, and the slowdown
# against the same seed alone, in one table. Each with one learner intra-op thread, and with
# two whose OpenMP threads wait passively (what the learner sets for itself) or spin (libgomp's
# default, which collapses beside a neighbour: a thread spins at a barrier for one that is
# descheduled).
#   bash bench/contention.sh                     # seeds 0 1, 30k env steps
#   SEEDS="0 1 2" STEPS=60000 bash bench/contention.sh
#   NEIGHBOURS="busy" bash bench/contention.sh   # only the busy loops (none, busy, torch)
#   THREADS="2" WAITS="spin" bash bench/contention.sh   # learner.torch_threads, and how its
#                                                      # OpenMP threads wait (passive, spin)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
py=.venv/bin/python
cores=$(nproc)
steps="${STEPS:-30000}"
out=$(mktemp -d)
neighbour_pids=()
stop_neighbour() {
  for pid in "${neighbour_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  neighbour_pids=()
}
trap stop_neighbour EXIT
start_neighbour() {
  case "$1" in
    none) ;;
    busy) for _ in $(seq "$cores"); do sh -c 'while :; do :; done' & neighbour_pids+=($!); done ;;
    torch)
      "$py" -c 'import torch
a = torch.randn(256, 256)
while True:
    a = torch.tanh(a @ a)' &
      neighbour_pids+=($!) ;;
    *) echo "unknown neighbour $1 (none, busy, torch)" >&2; exit 2 ;;
  esac
  sleep 1
}
echo "| torch threads | OpenMP wait | neighbour | seed | env steps/s | wall s | learner update ms (mean) | slowdown vs alone |"
echo "|---|---|---|---|---|---|---|---|"
declare -A alone
for threads in ${THREADS:-1 2}; do
for wait in ${WAITS:-passive spin}; do
  # One thread runs no OpenMP team: its wait policy changes nothing.
  [ "$threads" = 1 ] && [ "$wait" = spin ] && continue
  # passive: what the learner sets itself (learner.torch_threads > 1); spin: libgomp's
  # default when nobody sets it (ACTIVE with its default spin count, 300,000).
  wait_env=()
  [ "$wait" = spin ] && wait_env=(OMP_WAIT_POLICY=ACTIVE GOMP_SPINCOUNT=300000)
for neighbour in ${NEIGHBOURS:-none busy torch}; do
  for seed in ${SEEDS:-0 1}; do
    start_neighbour "$neighbour"
    run="$out/$threads-$wait-$neighbour-$seed"
    env "${wait_env[@]}" target/release/fleetrl train --config cartpole-ppo --set seed="$seed" \
      --set learner.torch_threads="$threads" \
      --set stop.target_return=inf --set stop.total_env_steps="$steps" --out "$run" \
      >/dev/null 2>"$run.log"
    stop_neighbour
    row=$("$py" - "$run" <<'PY'
import json, re, sys
run = sys.argv[1]
s = json.load(open(f"{run}/summary.json"))
log = re.sub(r"\x1b\[[0-9;]*m", "", open(f"{run}/logs/learner.log").read())
ms = [float(x) for x in re.findall(r"update_ms=([0-9.]+)", log)]
mean = sum(ms) / len(ms) if ms else float("nan")
print(f"{s['env_steps_per_second']:.0f} {s['wall_seconds']:.1f} {mean:.1f}")
PY
)
    read -r sps wall ms <<<"$row"
    key="$threads-$wait-$seed"
    [ "$neighbour" = none ] && alone[$key]=$wall
    slow="-"
    [ -n "${alone[$key]:-}" ] && slow=$(awk -v a="${alone[$key]}" -v b="$wall" 'BEGIN { printf "%.2fx", b / a }')
    label=$wait
    [ "$threads" = 1 ] && label="- (no team)"
    echo "| $threads | $label | $neighbour | $seed | $sps | $wall | $ms | $slow |"
  done
done
done
done
echo
echo "raw outputs: $out ($cores cores)"
