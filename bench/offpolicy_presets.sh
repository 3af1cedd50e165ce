#!/usr/bin/env bash
# Off-policy presets through the real binaries beside Stable-Baselines3 2.9.2 on the same
# machine, in one run:
#  1. every off-policy preset (`fleetrl train --config <preset>`), SEEDS each: solved or not,
#     env steps and wall time to the target, env steps/s;
#  2. SB3 DQN (CartPole-v1) and SAC (Pendulum-v1) with RL-Zoo's hyperparameters, evaluated
#     the same way (20 deterministic episodes every 2,500 / 2,000 steps, stop at the target);
#  3. throughput with SB3's exact hyperparameters: fleetrl's dqn / sac with 256x256 networks,
#     SB3's learning rates, batch sizes and update ratios, against SB3 itself, for a fixed
#     number of steps without evaluation.
#   bash bench/offpolicy_presets.sh
#   SEEDS="1 2 3" PRESETS="cartpole-dqn pendulum-sac" SB3=0 bash bench/offpolicy_presets.sh
# Installs stable-baselines3 into the project venv the first time (unless SB3=0).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
presets=${PRESETS:-"cartpole-dqn cartpole-dqn-per pendulum-sac pendulum-td3 pendulum-ddpg"}
seeds=${SEEDS:-"1 2 3"}
out=$(mktemp -d)
summary() {
  python3 - "$@" <<'PY'
import json, sys
path, name, seed = sys.argv[1:4]
s = json.load(open(path))
hit = [e for e in s["evaluations"] if s["target_return"] is not None and e["mean_return"] >= s["target_return"]]
steps = hit[0]["env_steps"] if hit else "-"
wall = f"{hit[0]['wall_seconds']:.1f}" if hit else "-"
print(f"| {name} | {seed} | {s['solved']} | {steps} | {wall} | {s['total_env_steps']} | "
      f"{s['wall_seconds']:.1f} | {s['env_steps_per_second']:.0f} | {s['final_eval_return']:.1f} |")
PY
}
echo "### fleetrl presets"
echo "| preset | seed | solved | env steps to target | wall s to target | env steps | wall s | env steps/s | final eval |"
echo "|---|---|---|---|---|---|---|---|---|"
for preset in $presets; do
  for seed in $seeds; do
    target/release/fleetrl train --config "$preset" --set seed="$seed" --out "$out/$preset-$seed" \
      >/dev/null 2>"$out/$preset-$seed.log"
    summary "$out/$preset-$seed/summary.json" "$preset" "$seed"
  done
done
echo
echo "### fleetrl with SB3's exact hyperparameters (throughput, no evaluation before the end)"
echo "| run | seed | solved | env steps to target | wall s to target | env steps | wall s | env steps/s | final eval |"
echo "|---|---|---|---|---|---|---|---|---|"
sb3_dqn=(model.hidden_sizes=[256,256] algo.learning_rate=2.3e-3 algo.replay.n_step=1
  algo.target.period=5 algo.publish_interval=1 algo.double_q=false eval.interval_env_steps=1000000
  stop.total_env_steps=50000 stop.target_return=1000)
sb3_sac=(model.hidden_sizes=[256,256] algo.replay.min_size=100 algo.explore.random_steps=0
  eval.interval_env_steps=1000000 stop.total_env_steps=20000 stop.target_return=0)
for run in dqn sac; do
  if [ "$run" = dqn ]; then preset=cartpole-dqn; sets=("${sb3_dqn[@]}"); else preset=pendulum-sac; sets=("${sb3_sac[@]}"); fi
  args=(); for s in "${sets[@]}"; do args+=(--set "$s"); done
  target/release/fleetrl train --config "$preset" --set seed=1 "${args[@]}" --out "$out/exact-$run" \
    >/dev/null 2>"$out/exact-$run.log"
  summary "$out/exact-$run/summary.json" "$preset (SB3 hyperparameters)" 1
done
if [ "${SB3:-1}" != 0 ]; then
  py=.venv/bin/python
  "$py" -c 'import stable_baselines3' 2>/dev/null || "$py" -m pip install --quiet "stable-baselines3==2.9.2"
  echo
  echo "### Stable-Baselines3 2.9.2"
  echo "| run | seed | solved | env steps to target | wall s (incl. imports) | env steps/s |"
  echo "|---|---|---|---|---|---|"
  for algo in dqn sac; do
    for seed in $seeds; do
      "$py" bench/sb3_offpolicy.py "$algo" "$seed" target > "$out/sb3-$algo-$seed.json"
      python3 - "$out/sb3-$algo-$seed.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"| sb3 {r['algo']} (to target) | {r['seed']} | {r['solved']} | {r['steps_to_target'] or '-'} | "
      f"{r['wall_seconds']:.1f} | - |")
PY
    done
    steps=$([ "$algo" = dqn ] && echo 50000 || echo 20000)
    "$py" bench/sb3_offpolicy.py "$algo" 1 throughput "$steps" > "$out/sb3-$algo-tp.json"
    python3 - "$out/sb3-$algo-tp.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"| sb3 {r['algo']} (throughput) | 1 | - | - | {r['train_seconds']:.1f} | {r['env_steps_per_second']:.0f} |")
PY
  done
fi
echo
echo "raw outputs: $out"
