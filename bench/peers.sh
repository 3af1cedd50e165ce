#!/usr/bin/env bash
# fleetrl side by side with the RL systems its users compare it with, in one run on this
# machine: Sample Factory 2.1.1 (APPO), RLlib 2.60.0 (PPO) and PufferLib (pufferlib-core 3.0.23,
# its PuffeRL PPO, with its own torch 2.9.0), each installed from PyPI into its own virtualenv
# under target/peers/ (skipped, with pip's error in the table's notes, where it does not install
# cleanly). Each trains PPO on CartPole-v1 and on MinAtar Breakout at the same number of envs and
# workers as fleetrl (WORKERS actors/workers of ENVS envs each) on a fixed env-step budget:
# training env steps/s, and the wall time and env steps at which the target (CartPole: 475) was
# first reached, or the return at the budget (Breakout). Peers are measured on their running
# mean of training-episode returns; fleetrl on its own evaluation (20 deterministic episodes,
# confirmed on 100 fresh ones), and it stops at the target. bench/peers.py holds the peers'
# settings and why.
#   bash bench/peers.sh                                  # seed 0, 2 workers x 4 envs
#   SEED=1 CARTPOLE_STEPS=100000 BREAKOUT_STEPS=200000 MAX_SECONDS=240 PEERS="sf rllib" \
#     bash bench/peers.sh
#   PEERS=puffer PUFFER_BACKEND=Serial bash bench/peers.sh  # PufferLib's envs in its trainer's
#                                                          # process, not WORKERS processes
# The first run installs the peers (3-5 min each on an idle machine, 19-24 min under load; mostly
# PyTorch's wheels). SKIP_SETUP=1 skips scripts/setup.sh when the binaries are already built.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >&2   # SKIP_SETUP=1: binaries already built
source bench/peers_install.sh
SEED="${SEED:-0}" ENVS="${ENVS:-4}" WORKERS="${WORKERS:-2}"
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
log "load before: $(cut -d' ' -f1-3 /proc/loadavg); outputs in $out"
for game in cartpole breakout; do
  case "$game" in
    cartpole) preset=cartpole-ppo budget=$CARTPOLE_STEPS ;;
    breakout) preset=minatar-breakout-ppo budget=$BREAKOUT_STEPS ;;
  esac
  log "fleetrl $preset, $budget steps"
  target/release/fleetrl train --config "$preset" --set seed="$SEED" --set actors.count="$WORKERS" \
    --set actors.envs_per_actor="$ENVS" --set stop.total_env_steps="$budget" \
    --set eval.interval_env_steps=$(( budget / 4 < 50000 ? 5000 : 50000 )) \
    --set stop.max_wall_seconds="$MAX_SECONDS" \
    --out "$out/fleetrl-$game" >/dev/null 2>"$out/fleetrl-$game.log" || true
  for peer in $PEERS; do
    grep -q '^ok' "$peers_dir/$peer.status" 2>/dev/null || continue
    log "$peer $game, $budget steps"
    timeout $(( MAX_SECONDS + 300 )) "$peers_dir/$peer/bin/python" -W ignore bench/peers.py "$peer" \
      "$game" "$SEED" "$budget" "$ENVS" "$WORKERS" "$MAX_SECONDS" >"$out/$peer-$game.json" 2>"$out/$peer-$game.log" \
      || log "$peer $game failed: $(tail -n 3 "$out/$peer-$game.log")"
  done
done
log "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg), seed $SEED, $WORKERS workers x $ENVS envs"
echo
.venv/bin/python bench/table_row.py peers "$out" "$peers_dir"
echo
echo "raw outputs: $out"
