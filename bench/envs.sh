#!/usr/bin/env bash
# Env steps per second, side by side in one run: fleetrl's native CartPole-v1 and Pendulum-v1
# (one env and a vector of 64), gymnasium CartPole-v1 and Hopper-v5 and EnvPool CartPole-v1,
# Pendulum-v1 and Hopper-v5 hosted in fleetrl's env path (core/examples/env_steps.rs), against
# the same envs stepped from Python (bench/envs_python.py: gymnasium single and SyncVectorEnv,
# and EnvPool), all from the project's .venv (scripts/setup.sh installs EnvPool there).
#
# usage: bench/envs.sh [SECONDS per case, default 3]   (from the repository root)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-3}"
FLEETRL_SKIP_BUILD=1 bash scripts/setup.sh >&2
cargo build --quiet --release -p fleetrl-core --features python --example env_steps
results="$(mktemp)"
./target/release/examples/env_steps "$seconds" >>"$results"
.venv/bin/python bench/envs_python.py "$seconds" gymnasium >>"$results"
.venv/bin/python bench/envs_python.py "$seconds" envpool >>"$results"
printf '| system | env | envs | steps/s |\n|---|---|---:|---:|\n'
sort -t$'\t' -k2,2 -k3,3n "$results" | awk -F'\t' '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }'
rm -f "$results"
