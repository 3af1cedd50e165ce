#!/usr/bin/env bash
# MinAtar (Atari-class on a CPU): fleetrl's native games with the minatar-breakout-{ppo,dqn}
# presets vs Stable-Baselines3 2.9.2 with the same hyperparameters and network on the
# `minatar` package's own games (gymnasium MinAtar/<Game>-v1, sticky actions 0.1 on both
# sides), taking turns on the same seed in one run. Both evaluate 20 deterministic episodes
# every 50k env steps and at the end; the table gives the return at the budget, the best
# evaluation, wall time (process start to exit: fleetrl's includes starting its processes,
# SB3's its imports) and training env steps/s, with the ratios; then it draws every run's
# curve, fleetrl and SB3 on the same axes.
#   bash bench/minatar.sh                   # Breakout, seed 0: PPO 500k, DQN 200k steps (~40 min)
#   GAMES="Breakout SpaceInvaders Freeway Asterix Seaquest" SEEDS="0 1" PPO_STEPS=1000000 DQN_STEPS=300000 bash bench/minatar.sh
#   SB3=0 bash bench/minatar.sh             # fleetrl only
# Installs stable-baselines3 and minatar into the project venv the first time (unless SB3=0).
# Writes bench/results/minatar_<game>.png (PLOT_DIR= to change).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
py=.venv/bin/python
sb3=${SB3:-1}
if [ "$sb3" != 0 ]; then
  "$py" -c 'import stable_baselines3, minatar' 2>/dev/null ||
    "$py" -m pip install --quiet --disable-pip-version-check "stable-baselines3==2.9.2" "minatar==1.0.15"
fi
out=$(mktemp -d)
plot_dir=${PLOT_DIR:-bench/results}
mkdir -p "$plot_dir"
load() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }

row() { # SYSTEM ALGO GAME SEED JSON PROCESS_SECONDS
  "$py" bench/budget_row.py "$5" "$6" "$3" "$2" "$1" "$4"
}

table="$out/table.md"
echo "| game | algo | system | seed | env steps | return at budget | best eval | wall s | env steps/s |" >"$table"
echo "|---|---|---|---|---|---|---|---|---|" >>"$table"
for game in ${GAMES:-Breakout}; do
  id="MinAtar/$game-v1"
  for seed in ${SEEDS:-0}; do
    for algo in ppo dqn; do
      if [ "$algo" = ppo ]; then budget=${PPO_STEPS:-500000}; else budget=${DQN_STEPS:-200000}; fi
      dir="$out/fleetrl-$game-$algo-$seed"
      echo "[bench] fleetrl $algo $id seed $seed, $budget steps (load $(load))" >&2
      t=$(now)
      target/release/fleetrl train --config "minatar-breakout-$algo" --set env.id="$id" \
        --set seed="$seed" --set stop.total_env_steps="$budget" --set eval.interval_env_steps=50000 \
        --out "$dir" >/dev/null 2>"$dir.log"
      row fleetrl "$algo" "$game" "$seed" "$dir/summary.json" "$(python3 -c "print($(now) - $t)")" | tee -a "$table"
      if [ "$sb3" != 0 ]; then
        echo "[bench] sb3 $algo $id seed $seed, $budget steps (load $(load))" >&2
        t=$(now)
        "$py" -W ignore bench/sb3_minatar.py "$algo" "$id" "$seed" "$budget" >"$out/sb3-$game-$algo-$seed.json"
        row "sb3 2.9.2" "$algo" "$game" "$seed" "$out/sb3-$game-$algo-$seed.json" "$(python3 -c "print($(now) - $t)")" | tee -a "$table"
      fi
    done
  done
  png="$plot_dir/minatar_$(echo "$game" | tr 'A-Z' 'a-z').png"
  # One line per system and algorithm: the median of its seeds over their range.
  runs=()
  for algo in ppo dqn; do
    for r in "$out"/fleetrl-"$game"-"$algo"-*/; do [ -d "$r" ] && runs+=("fleetrl $algo=$r"); done
    for r in "$out"/sb3-"$game"-"$algo"-*.json; do [ -s "$r" ] && runs+=("sb3 $algo=$r"); done
  done
  target/release/fleetrl plot "${runs[@]}" \
    --title "MinAtar $game: fleetrl vs SB3 (PPO and DQN)" --out "$png" >&2
  echo "[bench] curves: $png" >&2
done
echo
cat "$table"
echo
echo "raw outputs: $out"
