#!/usr/bin/env bash
# Every on-policy preset through the real binaries (`fleetrl train --config <preset>`), three
# seeds each: solved or not, env steps and wall time to solve, training env steps/s, final
# evaluation and mean policy lag.
#   bash bench/onpolicy_presets.sh
#   SEEDS="1 2 3 4 5" PRESETS="cartpole-a2c cartpole-impala" bash bench/onpolicy_presets.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
presets=${PRESETS:-"cartpole-ppo cartpole-a2c cartpole-vpg cartpole-trpo cartpole-impala pointmass-ppo cartpolenovel-ppo-lstm"}
out=$(mktemp -d)
echo "| preset | seed | solved | env steps | wall s | train env steps/s | final eval | mean policy lag |"
echo "|---|---|---|---|---|---|---|---|"
for preset in $presets; do
  for seed in ${SEEDS:-1 2 3}; do
    target/release/fleetrl train --config "$preset" --set seed="$seed" --out "$out/$preset-$seed" \
      >/dev/null 2>"$out/$preset-$seed.log"
    python3 - "$out/$preset-$seed/summary.json" "$preset" "$seed" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {s['solved']} | {s['total_env_steps']} | "
      f"{s['wall_seconds']:.1f} | {s['env_steps_per_second']:.0f} | {s['final_eval_return']:.1f} | "
      f"{s['mean_policy_lag']:.1f} |")
PY
  done
done
echo
echo "raw outputs: $out"
