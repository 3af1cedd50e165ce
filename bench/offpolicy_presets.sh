#!/usr/bin/env bash
# Off-policy presets through the real binaries beside Stable-Baselines3 2.9.2 on the same
# machine, in one run, the two taking turns so that both see the same load:
#  1. per seed: the CartPole presets (`fleetrl train --config <preset>`), then SB3 DQN with
#     RL-Zoo's hyperparameters on CartPole-v1; the Pendulum presets, then SB3 SAC (RL-Zoo) on
#     Pendulum-v1. Both evaluate 20 deterministic episodes as the presets do and stop at the
#     target (475 / -200). The table gives env steps and wall time to the target (fleetrl: from
#     the launcher's start, so process start is included; SB3: from the interpreter's start, so
#     imports are included), fleetrl's whole process time (start to exit), env steps/s, and
#     the ratio of wall times to the target, same seed;
#  2. throughput with SB3's exact hyperparameters (256x256 networks, SB3's learning rates,
#     batch sizes and update ratios), fleetrl then SB3, a fixed number of steps without
#     evaluation: DQN CartPole EXACT_DQN_STEPS (20,000), SAC Pendulum EXACT_SAC_STEPS (3,000).
#   bash bench/offpolicy_presets.sh                 # 3 seeds (~20-30 min on an idle machine)
#   SEEDS=1 bash bench/offpolicy_presets.sh         # quick: one seed (~6-10 min)
#   PRESETS="cartpole-dqn pendulum-sac" SB3=0 bash bench/offpolicy_presets.sh
# Installs stable-baselines3 into the project venv the first time (unless SB3=0). Every line of
# the table carries the 1-minute load average at the time of the run. SB3 uses 2 torch threads;
# on a machine loaded by others, SB3_TORCH_THREADS=1 (2 threads spin-wait there: SB3's DQN ran
# for >6 CPU minutes without reaching 475 at load 4-12).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
presets=${PRESETS:-"cartpole-dqn cartpole-dqn-per pendulum-sac pendulum-td3 pendulum-ddpg"}
seeds=${SEEDS:-"1 2 3"}
sb3=${SB3:-1}
py=.venv/bin/python
out=$(mktemp -d)
runs="$out/runs.tsv"
: >"$runs"
if [ "$sb3" != 0 ]; then
  "$py" -c 'import stable_baselines3' 2>/dev/null || "$py" -m pip install --quiet "stable-baselines3==2.9.2"
fi

now() { date +%s.%N; }
load() { cut -d' ' -f1 /proc/loadavg; }
# record KIND NAME SEED JSON START_TIME
record() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" \
    "$(python3 -c "print($(now) - $5)")" "$(load)" >>"$runs"
  echo "[bench] $1 $2 seed $3 done (load $(load))" >&2
}
# fleetrl_run KIND NAME SEED PRESET [--set k=v]...
fleetrl_run() {
  local kind=$1 name=$2 seed=$3 preset=$4 dir="$out/$1-$2-$3" t
  shift 4
  t=$(now)
  target/release/fleetrl train --config "$preset" --set seed="$seed" "$@" --out "$dir" \
    >/dev/null 2>"$dir.log"
  record "$kind" "$name" "$seed" "$dir/summary.json" "$t"
}
# sb3_run KIND NAME SEED ARGS...
sb3_run() {
  local kind=$1 name=$2 seed=$3 json="$out/$1-$2-$3.json" t
  shift 3
  t=$(now)
  "$py" bench/sb3_offpolicy.py "$@" >"$json"
  record "$kind" "$name" "$seed" "$json" "$t"
}

for seed in $seeds; do
  for group in cartpole:dqn pendulum:sac; do
    env=${group%%:*} algo=${group##*:} ran=0
    for preset in $presets; do
      case $preset in "$env"-*) fleetrl_run fleetrl "$preset" "$seed" "$preset"; ran=1 ;; esac
    done
    if [ "$ran" = 1 ] && [ "$sb3" != 0 ]; then
      sb3_run sb3 "$algo" "$seed" "$algo" "$seed" target
    fi
  done
done

# SB3's exact hyperparameters: RL-Zoo's DQN (lr 2.3e-3, batch 64, 128 gradient steps after
# every 256 env steps, n-step 1, no double Q, epsilon over 8k steps) and SB3's SAC defaults
# with lr 1e-3 (learning starts at 100 steps, no warm-up beyond them); 256x256 networks for
# both. SB3 copies DQN's target every 10 env steps, but only while it collects, when the
# online network does not move: each burst of 128 updates runs against the network as it was
# at the burst's start. fleetrl interleaves its updates with collection, so the same target is
# a copy every 128 updates (a copy every 5 updates, tried before, diverged: Q near 1e8).
dqn_steps=${EXACT_DQN_STEPS:-20000}
sac_steps=${EXACT_SAC_STEPS:-3000}
no_eval=(--set eval.interval_env_steps=100000000 --set eval.on_target_training_return=false)
fleetrl_run fleetrl-exact "dqn CartPole-v1" 1 cartpole-dqn "${no_eval[@]}" \
  --set 'model.hidden_sizes=[256,256]' --set algo.learning_rate=2.3e-3 \
  --set algo.replay.n_step=1 --set algo.target.period=128 --set algo.publish_interval=1 \
  --set algo.double_q=false --set algo.explore.epsilon_decay_steps=8000 \
  --set stop.total_env_steps="$dqn_steps" --set stop.target_return=1000
[ "$sb3" != 0 ] && sb3_run sb3-exact "dqn CartPole-v1" 1 dqn 1 throughput "$dqn_steps"
fleetrl_run fleetrl-exact "sac Pendulum-v1" 1 pendulum-sac "${no_eval[@]}" \
  --set 'model.hidden_sizes=[256,256]' --set algo.replay.min_size=100 \
  --set algo.explore.random_steps=100 --set algo.publish_interval=1 \
  --set stop.total_env_steps="$sac_steps" --set stop.target_return=0
[ "$sb3" != 0 ] && sb3_run sb3-exact "sac Pendulum-v1" 1 sac 1 throughput "$sac_steps"

echo
python3 bench/offpolicy_table.py "$out"
echo
echo "raw outputs: $out"
