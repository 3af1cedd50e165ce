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
# EnvPool (and the gymnasium it pins) goes into its own venv, so the project venv's gymnasium
# 1.4 (what fleetrl hosts, and what the gymnasium rows step) stays as it is.
bench_venv="$root/target/bench-envpool-venv"
[[ -x "$bench_venv/bin/python" ]] || .venv/bin/python -m venv "$bench_venv"
envpool=1
"$bench_venv/bin/python" -c 'import envpool' 2>/dev/null ||
  "$bench_venv/bin/python" -m pip install --quiet --disable-pip-version-check envpool >/dev/null 2>&1 ||
  { envpool=0; echo "[envs.sh] envpool does not install here; its rows are skipped" >&2; }
results="$(mktemp)"
./target/release/examples/env_steps "$seconds" >>"$results"
.venv/bin/python bench/envs_python.py "$seconds" gymnasium >>"$results"
[[ $envpool == 0 ]] || "$bench_venv/bin/python" bench/envs_python.py "$seconds" envpool >>"$results"
printf '| system | env | envs | steps/s |\n|---|---|---:|---:|\n'
sort -t$'\t' -k2,2 -k3,3n "$results" | awk -F'\t' '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }'
rm -f "$results"
