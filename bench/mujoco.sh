#!/usr/bin/env bash
# MuJoCo presets vs Stable-Baselines3 2.9.2 with RL-Zoo's hyperparameters on the same
# gymnasium env (bench/sb3_mujoco.py), taking turns on the same seed and budget in one run.
# Both evaluate 10 deterministic episodes every 10,000 env steps and at the end; the table
# gives the return at the budget, the best evaluation, wall time (process start to exit:
# fleetrl's includes starting its processes, SB3's its imports) and training env steps/s;
# then it draws each env's curves, fleetrl and SB3 on the same axes.
#   bash bench/mujoco.sh                          # hopper-td3, seed 0, 100k steps (~35 min here)
#   PRESETS="hopper-td3" SEEDS="0 1" BUDGET=200000 bash bench/mujoco.sh
#   PRESETS="hopper-sac halfcheetah-td3 halfcheetah-sac" bash bench/mujoco.sh
#   SB3=0 bash bench/mujoco.sh                    # fleetrl only
#   FLEETRL=0 bash bench/mujoco.sh                # SB3 only
# To run many seeds in two lanes, one a core (SB3=0 beside FLEETRL=0), give SB3 one torch
# thread (SB3_TORCH_THREADS=1; bench/sb3_runs.py sets torch's thread count from it, default 2,
# so OMP_NUM_THREADS alone does not do it): with two, beside a fleetrl run on this 2-core
# machine, SB3's SAC fell to about 9 updates a second (2026-11-27: 41.8k in 80 minutes), its
# main thread waiting at an OpenMP barrier for the other. With one it trained HalfCheetah at
# 59 env steps/s beside fleetrl. The lanes' wall times are not comparable with a run alone.
# Installs stable-baselines3 into the project venv the first time (unless SB3=0). Writes
# bench/results/mujoco_<env>.png (PLOT_DIR= to change).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
py=.venv/bin/python
sb3=${SB3:-1}
fleetrl=${FLEETRL:-1}
budget=${BUDGET:-100000}
if [ "$sb3" != 0 ]; then
  "$py" -c 'import stable_baselines3' 2>/dev/null ||
    "$py" -m pip install --quiet --disable-pip-version-check "stable-baselines3==2.9.2"
fi
out=$(mktemp -d)
plot_dir=${PLOT_DIR:-bench/results}
mkdir -p "$plot_dir"
load() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }

row() { # SYSTEM PRESET SEED JSON PROCESS_SECONDS
  "$py" bench/budget_row.py "$4" "$5" "$2" "$1" "$3"
}

table="$out/table.md"
echo "| preset | system | seed | env steps | return at budget | best eval | wall s | env steps/s |" >"$table"
echo "|---|---|---|---|---|---|---|---|" >>"$table"
for preset in ${PRESETS:-hopper-td3}; do
  algo=${preset##*-}
  env_id=$(sed -n 's/^id = "gym:\(.*\)"/\1/p' "configs/$preset.toml")
  for seed in ${SEEDS:-0}; do
    if [ "$fleetrl" != 0 ]; then
      dir="$out/fleetrl-$preset-$seed"
      echo "[bench] fleetrl $preset seed $seed, $budget steps (load $(load))" >&2
      t=$(now)
      target/release/fleetrl train --config "$preset" --set seed="$seed" \
        --set stop.total_env_steps="$budget" --out "$dir" >/dev/null 2>"$dir.log"
      row fleetrl "$preset" "$seed" "$dir/summary.json" "$(python3 -c "print($(now) - $t)")" | tee -a "$table"
    fi
    if [ "$sb3" != 0 ]; then
      echo "[bench] sb3 $algo $env_id seed $seed, $budget steps (load $(load))" >&2
      t=$(now)
      "$py" -W ignore bench/sb3_mujoco.py "$algo" "$env_id" "$seed" "$budget" >"$out/sb3-$preset-$seed.json"
      row "sb3 2.9.2" "$preset" "$seed" "$out/sb3-$preset-$seed.json" "$(python3 -c "print($(now) - $t)")" | tee -a "$table"
    fi
  done
  png="$plot_dir/mujoco_$preset.png"
  title="fleetrl $preset vs SB3 $algo (RL-Zoo)"
  [ "$sb3" = 0 ] && title="fleetrl $preset"
  [ "$fleetrl" = 0 ] && title="SB3 $algo (RL-Zoo settings of $preset)"
  # One line per system: the median of its seeds over their range.
  runs=()
  for r in "$out"/fleetrl-"$preset"-*/; do [ -d "$r" ] && runs+=("fleetrl=$r"); done
  for r in "$out"/sb3-"$preset"-*.json; do [ -s "$r" ] && runs+=("sb3 $algo=$r"); done
  target/release/fleetrl plot "${runs[@]}" \
    --title "$env_id: $title" --out "$png" >&2
  echo "[bench] curves: $png" >&2
done
echo
cat "$table"
echo
echo "raw outputs: $out"
