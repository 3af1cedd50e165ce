#!/usr/bin/env bash
# fleetrl side by side with the RL systems its users compare it with, in one run on this
# machine: Sample Factory 2.1.1 (APPO), RLlib 2.60.0 (PPO) and PufferLib (pufferlib-core 3.0.23,
# its PuffeRL PPO, with its own torch 2.9.0), each installed from PyPI into its own virtualenv
# under target/peers/ (skipped, with pip's error in the table's notes, where it does not install
# cleanly). Each trains PPO on CartPole-v1 and on MinAtar Breakout at the same number of envs and
# workers as fleetrl (WORKERS actors/workers of ENVS envs each) on a fixed env-step budget, for
# each seed of SEEDS: training env steps/s, the training mean at the budget, and the wall time and
# env steps at which the target was first reached (CartPole 475, Breakout 4.0; why in
# bench/peers_games.py). The target is on each system's running mean of its last 100 training
# episodes (fleetrl's from its TensorBoard events), except fleetrl's on CartPole: its own stop,
# 20 deterministic evaluation episodes confirmed on 100 fresh ones. bench/peers.py holds the
# peers' settings and why.
# Breakout's learning rate is 2.5e-4, constant, for every system (fleetrl gets
# algo.linear_lr_schedule=false): the preset decays it linearly to zero over stop.total_env_steps,
# which this bench cuts from 1M to 200k (a fivefold faster decay), and the systems do not share a
# decaying schedule (Sample Factory 2.1.1 has none, PufferLib's is cosine). CartPole keeps each
# system's recipe.
#   bash bench/peers.sh                                  # seed 0, 2 workers x 4 envs
#   SEEDS="0 1 2" CARTPOLE_STEPS=100000 BREAKOUT_STEPS=200000 MAX_SECONDS=240 PEERS="sf rllib" \
#     bash bench/peers.sh
#   GAMES=breakout SEEDS=1 PEERS="rllib puffer" bash bench/peers.sh  # one game (SEED=1 also works)
#   PEERS=puffer PUFFER_BACKEND=Serial bash bench/peers.sh  # PufferLib's envs in its trainer's
#                                                          # process, not WORKERS processes
# The first run installs the peers (3-5 min each on an idle machine, 19-24 min under load; mostly
# PyTorch's wheels). SKIP_SETUP=1 skips scripts/setup.sh when the binaries are already built.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >&2   # SKIP_SETUP=1: binaries already built
source bench/peers_install.sh
SEEDS="${SEEDS:-${SEED:-0}}" GAMES="${GAMES:-cartpole breakout}" ENVS="${ENVS:-4}" WORKERS="${WORKERS:-2}"
CARTPOLE_STEPS="${CARTPOLE_STEPS:-100000}" BREAKOUT_STEPS="${BREAKOUT_STEPS:-200000}"
MAX_SECONDS="${MAX_SECONDS:-240}"   # per run, every system alike (a slow machine ends runs early)
PEERS="${PEERS:-sf rllib puffer}"
log() { printf '[peers] %s\n' "$*" >&2; }

for peer in $PEERS; do
  log "installing $peer into $peers_dir/$peer (skipped when already there)"
  case "$peer" in
    sf) install_peer sf 'import sample_factory, minatar' \
          sample-factory==2.1.1 torch==2.11.0 minatar==1.0.15 || true ;;
    rllib) install_peer rllib 'import ray.rllib, minatar, torch' \
          'ray[rllib]==2.60.0' torch==2.11.0 minatar==1.0.15 || true ;;
    puffer) install_peer puffer 'import pufferlib.pufferl, minatar' \
          pufferlib-core==3.0.23 minatar==1.0.15 || true ;;
  esac
  log "$peer: $(head -n 1 "$peers_dir/$peer.status")"
done

out=$(mktemp -d)
started="$(date -u '+%Y-%m-%d %H:%M UTC')" load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
log "load before: $load_before; outputs in $out"
for seed in $SEEDS; do
  mkdir -p "$out/$seed"
  for game in $GAMES; do
    lr=()
    case "$game" in
      cartpole) preset=cartpole-ppo budget=$CARTPOLE_STEPS ;;
      breakout) preset=minatar-breakout-ppo budget=$BREAKOUT_STEPS lr=(--set algo.linear_lr_schedule=false) ;;
    esac
    log "seed $seed: fleetrl $preset, $budget steps"
    date +%s.%N >"$out/$seed/fleetrl-$game.start"   # the target's wall time counts from here
    target/release/fleetrl train --config "$preset" --set seed="$seed" --set actors.count="$WORKERS" \
      --set actors.envs_per_actor="$ENVS" --set stop.total_env_steps="$budget" "${lr[@]}" \
      --set eval.interval_env_steps=$(( budget / 4 < 50000 ? 5000 : 50000 )) \
      --set stop.max_wall_seconds="$MAX_SECONDS" \
      --out "$out/$seed/fleetrl-$game" >/dev/null 2>"$out/$seed/fleetrl-$game.log" || true
    for peer in $PEERS; do
      grep -q '^ok' "$peers_dir/$peer.status" 2>/dev/null || continue
      log "seed $seed: $peer $game, $budget steps"
      # A run that printed its line and then exited non-zero is no failure: Sample Factory's
      # runner kills its own process group once it has reported (bench/peers.py says why).
      timeout $(( MAX_SECONDS + 300 )) "$peers_dir/$peer/bin/python" -W ignore bench/peers.py "$peer" \
        "$game" "$seed" "$budget" "$ENVS" "$WORKERS" "$MAX_SECONDS" \
        >"$out/$seed/$peer-$game.json" 2>"$out/$seed/$peer-$game.log" \
        || [ -s "$out/$seed/$peer-$game.json" ] \
        || log "$peer $game failed: $(tail -n 3 "$out/$seed/$peer-$game.log")"
    done
  done
done
log "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$started to $(date -u '+%H:%M UTC'), load average $load_before at the start," \
  "$(cut -d' ' -f1-3 /proc/loadavg) at the end; seeds $SEEDS, $WORKERS workers x $ENVS envs"
echo
.venv/bin/python bench/peers_table.py "$out" "$peers_dir"
echo
echo "raw outputs: $out"
