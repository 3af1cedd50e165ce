#!/usr/bin/env bash
# Every preset on seeds nobody tuned on (100-104 by default), through the real binaries
# (`fleetrl train --config <preset> --set seed=<seed>`, each preset's own budget and target):
# one row per preset with the solved rate, the median and worst env steps to solve (over the
# solved seeds), the worst and median final evaluations, and the median wall time (a preset
# without a stop target runs its budget: no solved rate, its final evaluations); then every run.
# Progress goes to stderr: each run as it starts and its result as it ends.
#   bash bench/seeds.sh
#   SEEDS="100 101 102" PRESETS="cartpole-ppo cartpole-dqn" bash bench/seeds.sh
# The default presets are the ones this 2-core machine trains in minutes: the CartPole family,
# Acrobot, MountainCar, PointMass, the Pendulum trio and the recurrent presets (PPO-LSTM on
# CartPoleNoVel and PendulumNoVel, R2D2; about 16 minutes of the whole run) (not Hopper, Pong,
# MinAtar, the meta-RL presets or the demo-based ones: BC needs an expert, PPO+D a
# demonstration; see their own benches).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
cargo build --release --bins >&2
presets=${PRESETS:-"cartpole-ppo cartpole-a2c cartpole-vpg cartpole-trpo cartpole-impala cartpole-dqn cartpole-dqn-per cartpolenovel-ppo-lstm pendulumnovel-ppo-lstm cartpolenovel-r2d2 acrobot-ppo mountaincar-ppo pointmass-ppo pendulum-sac pendulum-td3 pendulum-ddpg"}
seeds=${SEEDS:-"100 101 102 103 104"}
out=$(mktemp -d)
for preset in $presets; do
  for seed in $seeds; do
    echo "[seeds] $preset seed $seed..." >&2
    rc=0
    target/release/fleetrl train --config "$preset" --set "seed=$seed" \
      --out "$out/$preset-$seed" >/dev/null 2>"$out/$preset-$seed.log" || rc=$?
    if [ "$rc" != 0 ]; then
      # The status says how: 1 an error (in the log), 130 interrupted, 128+N killed by signal N.
      echo "[seeds] $preset seed $seed failed (exit status $rc); its log: $out/$preset-$seed.log" >&2
    else
      # Each run's result as it lands (MuJoCo and MinAtar runs take minutes each).
      .venv/bin/python - "$out/$preset-$seed/summary.json" >&2 <<'PY' || true
import json, sys
s = json.load(open(sys.argv[1]))
print("[seeds]   {:,} env steps, final eval {:.1f}, solved {}, {:.0f} s".format(
    s["total_env_steps"], s["final_eval_return"], s["solved"], s["wall_seconds"]))
PY
    fi
  done
done
.venv/bin/python - "$out" "$seeds" $presets <<'PY'
import json, os, statistics, sys

out, seeds, presets = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
rows, runs = [], []
for preset in presets:
    got = []
    for seed in seeds:
        path = os.path.join(out, f"{preset}-{seed}", "summary.json")
        if not os.path.exists(path):
            runs.append(f"| {preset} | {seed} | run failed | - | - | - |")
            got.append(None)
            continue
        s = json.load(open(path))
        got.append(s)
        runs.append(f"| {preset} | {seed} | {s['solved']} | {s['total_env_steps']:,} | "
                    f"{s['final_eval_return']:.1f} | {s['wall_seconds']:.1f} |")
    done = [s for s in got if s]
    solved = [s["total_env_steps"] for s in done if s["solved"]]
    worst_eval = min((s["final_eval_return"] for s in done), default=float("nan"))
    walls = [s["wall_seconds"] for s in done]
    median_eval = statistics.median([s["final_eval_return"] for s in done]) if done else float("nan")
    target = done[0]["target_return"] if done else None
    wall = statistics.median(walls) if walls else float("nan")
    if target is None:
        # A fixed-budget preset (no stop target): nothing to solve, the final evaluations say
        # how it ended.
        rows.append(f"| {preset} | none | {len(done)}/{len(seeds)} ran | - | - | "
                    f"{worst_eval:.1f} | {median_eval:.1f} | {wall:.1f} |")
    elif solved:
        rows.append(f"| {preset} | {target} | {len(solved)}/{len(seeds)} | "
                    f"{statistics.median(solved):,.0f} | {max(solved):,} | {worst_eval:.1f} | "
                    f"{median_eval:.1f} | {wall:.1f} |")
    else:
        rows.append(f"| {preset} | {target} | 0/{len(seeds)} | - | - | {worst_eval:.1f} | "
                    f"{median_eval:.1f} | {wall:.1f} |")
print(f"Seeds {', '.join(seeds)}; each preset's own budget and target; load average at the end: "
      f"{open('/proc/loadavg').read().split()[0]}")
print()
print("| preset | target | solved | median steps to solve | worst steps to solve | "
      "worst final eval | median final eval | median wall s |")
print("|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
print()
print("| preset | seed | solved | env steps | final eval | wall s |")
print("|---|---|---|---|---|---|")
print("\n".join(runs))
PY
echo "raw outputs: $out" >&2
