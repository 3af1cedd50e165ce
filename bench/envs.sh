#!/usr/bin/env bash
# Env steps per second, side by side in one run: fleetrl's native CartPole-v1 and Pendulum-v1
# (one env and a vector of 64) and gymnasium CartPole-v1 and Hopper-v5 hosted in fleetrl's env
# path (core/examples/env_steps.rs), against the same envs stepped from Python
# (bench/envs_python.py: gymnasium single and SyncVectorEnv, and EnvPool when `pip install
# envpool` works in a separate venv, target/bench-envpool-venv).
#
# usage: bench/envs.sh [SECONDS per case, default 3]   (from the repository root)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-3}"
cargo build --quiet --release -p fleetrl-core --features python --example env_steps
bench_venv="$root/target/bench-envpool-venv"
if [[ ! -x "$bench_venv/bin/python" ]]; then
  .venv/bin/python -m venv --system-site-packages "$bench_venv"
fi
# EnvPool ships wheels for some Pythons only: try once, keep going without it.
"$bench_venv/bin/python" -c 'import envpool' 2>/dev/null ||
  "$bench_venv/bin/python" -m pip install --quiet --disable-pip-version-check envpool >/dev/null 2>&1 ||
  echo "[envs.sh] envpool does not install here; its rows are skipped" >&2
results="$(mktemp)"
./target/release/examples/env_steps "$seconds" >>"$results"
"$bench_venv/bin/python" bench/envs_python.py "$seconds" >>"$results"
printf '| system | env | envs | steps/s |\n|---|---|---:|---:|\n'
sort -t$'\t' -k2,2 -k3,3n "$results" | awk -F'\t' '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }'
rm -f "$results"
