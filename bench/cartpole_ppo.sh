#!/usr/bin/env bash
# Side-by-side: fleetrl vs Stable-Baselines3 2.9.2, PPO on CartPole-v1 with RL-Zoo's
# hyperparameters, three seeds each, in the same run on this machine.
#   bash bench/cartpole_ppo.sh            # seeds 0 1 2
#   SEEDS="0 1 2 3 4" bash bench/cartpole_ppo.sh
# Writes the curves of every run to bench/results/cartpole_ppo.png (PLOT=path to change).
# Installs stable-baselines3 into the project venv the first time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
py=.venv/bin/python
"$py" -c 'import stable_baselines3' 2>/dev/null || "$py" -m pip install --quiet "stable-baselines3==2.9.2"
out=$(mktemp -d)
echo "| system | seed | solved | env steps | wall s (to solve or end) | train env steps/s | final eval |"
echo "|---|---|---|---|---|---|---|"
for seed in ${SEEDS:-0 1 2}; do
  target/release/fleetrl train --config cartpole-ppo --set seed="$seed" --out "$out/fleetrl-$seed" >/dev/null 2>"$out/fleetrl-$seed.log"
  "$py" bench/table_row.py fleetrl "$out/fleetrl-$seed/summary.json" "$seed"
  "$py" -W ignore bench/sb3_cartpole_ppo.py "$seed" > "$out/sb3-$seed.json"
  "$py" bench/table_row.py sb3 < "$out/sb3-$seed.json"
done
echo
# Both systems' evaluation curves on the same axes (env steps and wall time).
target/release/fleetrl plot "$out"/fleetrl-*/ "$out"/sb3-*.json --title "CartPole-v1 PPO: fleetrl vs SB3" \
  --out "${PLOT:-bench/results/cartpole_ppo.png}" 2>&1
echo
echo "raw outputs: $out"
