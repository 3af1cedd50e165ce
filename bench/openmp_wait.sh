#!/usr/bin/env bash
# How libtorch's OpenMP threads wait, beside a neighbour: one PEARL update at
# point-robot-sparse-pearl's sizes (core/examples/pearl_update, 200 updates) on 1 intra-op thread
# and on 2 whose OpenMP threads spin (libgomp's default: the variable unset, and ACTIVE with the
# default spin count of 300,000) or wait passively (OMP_WAIT_POLICY=PASSIVE, what fleet-learner
# sets for itself when learner.torch_threads > 1); alone and beside one busy loop per core, the
# cases interleaved. Prints each case's mean update in ms.
#   bash bench/openmp_wait.sh
#   ROUNDS=3 UPDATES=500 bash bench/openmp_wait.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
cargo build --release --workspace --example pearl_update >&2
bin=target/release/examples/pearl_update
updates="${UPDATES:-200}"
hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  hogs=()
}
trap stop_hogs EXIT
ms() { "$@" "$bin" point-robot-sparse-pearl "$updates" | sed 's/.*"update_ms":\([0-9.]*\).*/\1/'; }
echo "| round | neighbour | 1 thread | 2 threads, unset (spin) | 2 threads, ACTIVE 300k (spin) | 2 threads, PASSIVE |"
echo "|---|---|---|---|---|---|"
for round in $(seq "${ROUNDS:-2}"); do
  for neighbour in none busy; do
    if [ "$neighbour" = busy ]; then
      for _ in $(seq "$(nproc)"); do sh -c 'while :; do :; done' & hogs+=($!); done
    fi
    sleep 0.5
    one=$(ms env -u OMP_WAIT_POLICY THREADS=1)
    unset_=$(ms env -u OMP_WAIT_POLICY THREADS=2)
    active=$(ms env OMP_WAIT_POLICY=ACTIVE GOMP_SPINCOUNT=300000 THREADS=2)
    passive=$(ms env OMP_WAIT_POLICY=PASSIVE THREADS=2)
    stop_hogs
    echo "| $round | $neighbour | $one | $unset_ | $active | $passive |"
  done
done
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), ms per update"
