#!/usr/bin/env bash
# MinAtar DQN beside the MinAtar authors' own: bench/minatar_reference_dqn.py (our implementation
# of their examples/dqn.py, which the `minatar` sdist does not ship) against fleetrl's
# minatar-breakout-dqn preset (with env.id=MinAtar/<Game>-v1) on the same games, seeds and frame
# budget. One frame is one env step. The systems, one run each per game and seed:
#   reference    bench/minatar_reference_dqn.py on the `minatar` package's game (its 6 actions)
#   reference-minimal  the same with the game's minimal action set (REF_ACTIONS=minimal), as
#                fleetrl's presets play; not run unless SYSTEMS names it
#   fleetrl-ref  the preset with the reference's settings where fleetrl has the keys (REF_SETS):
#                MinAtar/<Game>-v0 (all six inputs, as the reference plays; the preset's -v1 has
#                the minimal set), centered RMSprop with alpha 0.95, momentum 0.95 and eps 0.01,
#                no gradient clip, 5,000 random frames, epsilon reaching 0.1 at frame 105,000
#                (the reference: 1.0 at frame 5,000; fleetrl: 0.957 there)
#   fleetrl      the shipped preset: Adam, gradient-norm clip 10, epsilon 1 -> 0.1 over frames 0-100k
#   fleetrl-v0   the shipped preset on MinAtar/<Game>-v0, the reference's six actions; not run
#                unless SYSTEMS names it
# Each evaluates 20 greedy episodes every 25k frames and at the end; the budget is frames, not
# wall time (the preset's one-hour cap is lifted to a day, as the reference has none). The table gives the mean
# return of the last 100 training episodes (the reference's own record; fleetrl's summary keeps
# the same), the last and best evaluation, wall seconds and the 1-minute load at the start.
# Runs land in OUT (default target/minatar-reference); a run whose output is there is skipped, so
# two invocations with different SYSTEMS can share the cores and a third prints the whole table.
#   bash bench/minatar_reference.sh          # 5 games, seed 0, 100k frames, 3 systems: 15 runs of 5-45 min
#   SYSTEMS=reference GAMES="Breakout Freeway" SEEDS="0 1" FRAMES=200000 bash bench/minatar_reference.sh
# Installs minatar 1.0.15 (no dependencies) into target/minatar-1.0.15 the first time. Writes
# bench/results/minatar_reference_<game>.png (PLOT_DIR= to change).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
py=.venv/bin/python
pkg=target/minatar-1.0.15
[ -d "$pkg/minatar" ] ||
  "$py" -m pip install --quiet --disable-pip-version-check --no-deps --target "$pkg" "minatar==1.0.15"
out=${OUT:-target/minatar-reference}
frames=${FRAMES:-100000}
plot_dir=${PLOT_DIR:-bench/results}
mkdir -p "$out" "$plot_dir"
REF_SETS=(--set algo.optimizer=rmsprop --set algo.rmsprop_alpha=0.95 --set algo.optimizer_eps=0.01
  --set algo.rmsprop_momentum=0.95 --set algo.rmsprop_centered=true
  --set algo.clip_grad_norm=0 --set algo.explore.random_steps=5000
  --set algo.explore.epsilon_decay_steps=105000)
load() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }

run() { # SYSTEM GAME SEED: one run into $out/SYSTEM-GAME-SEED(.json), its row into .row
  local name="$out/$1-$2-$3" t sets=() summary
  [ -s "$name.row" ] && return
  echo "[bench] $1 $2 seed $3, $frames frames (load $(load), $(date -u +%H:%M:%S) UTC)" >&2
  local at_start
  at_start=$(load)
  t=$(now)
  if [ "${1%-minimal}" = reference ]; then
    local actions=full
    [ "$1" = reference-minimal ] && actions=minimal
    REF_ACTIONS=$actions REF_EVAL_EVERY=25000 PYTHONPATH="$pkg" "$py" -W ignore bench/minatar_reference_dqn.py "$2" "$3" "$frames" \
      >"$name.json" 2>"$name.log"
    summary="$name.json"
  else
    local id="MinAtar/$2-v1"
    [ "$1" = fleetrl-ref ] && sets=("${REF_SETS[@]}") && id="MinAtar/$2-v0"
    [ "$1" = fleetrl-v0 ] && id="MinAtar/$2-v0"
    rm -rf "$name"
    target/release/fleetrl train --config minatar-breakout-dqn --set env.id="$id" "${sets[@]}" \
      --set seed="$3" --set stop.total_env_steps="$frames" --set stop.max_wall_seconds=86400 \
      --set eval.interval_env_steps=25000 \
      --out "$name" >/dev/null 2>"$name.log"
    summary="$name/summary.json"
  fi
  "$py" bench/budget_row.py --training "$summary" "$(python3 -c "print($(now) - $t)")" "$2" "$3" "$1" "$at_start" \
    >"$name.row"
  cat "$name.row" >&2
}

for seed in ${SEEDS:-0}; do
  for game in ${GAMES:-Breakout SpaceInvaders Freeway Asterix Seaquest}; do
    for system in ${SYSTEMS:-reference fleetrl-ref fleetrl}; do
      run "$system" "$game" "$seed"
    done
  done
done

rows=()
echo "| game | seed | system | load at start | frames | training return (last 100) | return at budget | best eval | wall s | frames/s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for game in ${GAMES:-Breakout SpaceInvaders Freeway Asterix Seaquest}; do
  runs=()
  for seed in ${SEEDS:-0}; do
    for system in reference reference-minimal fleetrl-ref fleetrl-v0 fleetrl; do
      name="$out/$system-$game-$seed"
      [ -s "$name.row" ] || continue
      cat "$name.row"
      rows+=("$name.row")
      # One line per system: the median of its seeds over their range.
      if [ -s "$name.json" ]; then runs+=("$system=$name.json"); else runs+=("$system=$name"); fi
    done
  done
  [ ${#runs[@]} -gt 0 ] || continue
  png="$plot_dir/minatar_reference_$(echo "$game" | tr 'A-Z' 'a-z').png"
  target/release/fleetrl plot "${runs[@]}" --title "MinAtar $game: DQN, the MinAtar reference and fleetrl" \
    --out "$png" >&2
  echo "[bench] curves: $png" >&2
done
# Over several seeds, each system's medians on each game (of the rows above).
if [ "$(echo ${SEEDS:-0} | wc -w)" -gt 1 ] && [ ${#rows[@]} -gt 0 ]; then
  "$py" - "${rows[@]}" <<'PY'
import statistics, sys
runs = {}
for path in sys.argv[1:]:
    cells = [c.strip() for c in open(path).read().strip().strip("|").split("|")]
    runs.setdefault((cells[0], cells[2]), []).append([float(c.replace(",", "")) for c in cells[5:7]])
print("\n| game | system | seeds | median training return (last 100) | median return at budget |")
print("|---|---|---|---|---|")
for (game, system), seeds in runs.items():
    train, final = (statistics.median(s[i] for s in seeds) for i in (0, 1))
    print(f"| {game} | {system} | {len(seeds)} | {train:.2f} | {final:.1f} |")
PY
fi
