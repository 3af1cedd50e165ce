#!/usr/bin/env bash
# PPO+D vs PPO on SparseMountainCar-v0 (reward 1 only at the goal): one demonstration recorded
# with `fleetrl record --scripted`, then per seed fleetrl PPO+D, fleetrl PPO (same preset,
# ppod.enabled=false) and Stable-Baselines3 2.9.2 PPO (same task and hyperparameters), each
# for BUDGET env steps with a 20-episode deterministic evaluation every EVAL_EVERY steps and no
# early stop. Prints the learning curves (env steps vs return).
#   bash bench/ppod.sh                      # seeds 0 1 2, 100k steps
#   SEEDS="0 1 2 3 4" BUDGET=200000 bash bench/ppod.sh
# Installs stable-baselines3 (no dependencies: the project venv has torch and gymnasium) into
# target/bench-sb3 the first time, leaving the venv as it is; SB3=0 skips it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
budget=${BUDGET:-100000}
every=${EVAL_EVERY:-16384}
py=.venv/bin/python
export PYTHONPATH="$root/target/bench-sb3${PYTHONPATH:+:$PYTHONPATH}"
if [ "${SB3:-1}" = 1 ]; then
  "$py" -c 'import stable_baselines3' 2>/dev/null ||
    "$py" -m pip install --quiet --no-deps --target target/bench-sb3 "stable-baselines3==2.9.2"
fi
cargo build --release --workspace --bins >&2
out=$(mktemp -d)
target/release/fleetrl record --scripted SparseMountainCar-v0 --seed 5 --out "$out/demo" >&2
runs=()
for seed in ${SEEDS:-0 1 2}; do
  common=(--config sparse-mountaincar-ppod --set seed="$seed" --set stop.total_env_steps="$budget"
          --set stop.target_return=2 --set eval.interval_env_steps="$every")
  target/release/fleetrl train "${common[@]}" --set ppod.demos_dir="$out/demo" \
    --set ppod.target_dir="$out/top-$seed" --out "$out/ppod-$seed" >/dev/null 2>"$out/ppod-$seed.log"
  runs+=("fleetrl PPO+D, seed $seed=$out/ppod-$seed/summary.json")
  target/release/fleetrl train "${common[@]}" --set ppod.enabled=false \
    --out "$out/ppo-$seed" >/dev/null 2>"$out/ppo-$seed.log"
  runs+=("fleetrl PPO, seed $seed=$out/ppo-$seed/summary.json")
  if [ "${SB3:-1}" = 1 ]; then
    BUDGET=$budget EVAL_EVERY=$every "$py" -W ignore bench/sb3_sparse_mountaincar_ppo.py "$seed" >"$out/sb3-$seed.json"
    runs+=("SB3 PPO, seed $seed=$out/sb3-$seed.json")
  fi
done
"$py" bench/ppod_curves.py "${runs[@]}"
echo
echo "raw outputs: $out"
