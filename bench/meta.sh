#!/usr/bin/env bash
# Meta-RL (MAML and PEARL) through the real binaries at fixed budgets:
# - point-maml-trpo on PointGoal-v0 (the MAML paper's 2D navigation) at 800k env steps with 1
#   and 2 actors, and the task-agnostic baseline (point-ppo-multitask) on the same held-out goals;
# - point-pearl on the same goals at 60k env steps (2 actors);
# - point-robot-sparse-pearl on PointRobotSparse-v0 (the PEARL paper's sparse point robot) at
#   80k env steps, its preset's budget, with 1 and 2 actors;
# - halfcheetah-vel-maml-trpo on HalfCheetahVel-v0 (gymnasium MuJoCo) at 2M env steps with 1
#   and 2 actors, and halfcheetah-vel-pearl at 200k.
# Prints one row per run: return on the held-out tasks before adapting and adapted (MAML: after
# one step; PEARL: the episode after the exploration episodes), wall time, env steps/s,
# rollouts dropped; then each run's evaluation curve.
#   bash bench/meta.sh
#   POINT_STEPS=400000 CHEETAH_STEPS=1000000 PEARL_STEPS=30000 SPARSE_STEPS=50000 \
#     PEARL_CHEETAH_STEPS=50000 bash bench/meta.sh
# garage itself does not install here: garage 2021.3.0 pins torch<1.8, which has no wheel for
# this Python; compare with the MAML paper's curves at the same env steps instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
cargo build --release --bins >&2
point_steps=${POINT_STEPS:-800000}
cheetah_steps=${CHEETAH_STEPS:-2000000}
pearl_steps=${PEARL_STEPS:-60000}
sparse_steps=${SPARSE_STEPS:-80000}
pearl_cheetah_steps=${PEARL_CHEETAH_STEPS:-200000}
out=$(mktemp -d)
run() { # name preset actors steps [extra --set ...]
  local name=$1 preset=$2 actors=$3 steps=$4
  shift 4
  echo "[meta] $name ($preset, $actors actors, $steps steps)..." >&2
  target/release/fleetrl train --config "$preset" --set "actors.count=$actors" \
    --set "stop.total_env_steps=$steps" --set "stop.target_return=1e9" "$@" \
    --out "$out/$name" >/dev/null 2>"$out/$name.log" ||
    echo "[meta] $name failed; its log: $out/$name.log" >&2
}
run point-trpo-1 point-maml-trpo 1 "$point_steps"
run point-trpo-2 point-maml-trpo 2 "$point_steps"
run point-ppo-baseline point-ppo-multitask 2 "$point_steps" --set eval.interval_env_steps=200000
run point-pearl-2 point-pearl 2 "$pearl_steps"
run sparse-pearl-1 point-robot-sparse-pearl 1 "$sparse_steps" --set stop.max_wall_seconds=0
run sparse-pearl-2 point-robot-sparse-pearl 2 "$sparse_steps" --set stop.max_wall_seconds=0
run cheetah-trpo-1 halfcheetah-vel-maml-trpo 1 "$cheetah_steps"
run cheetah-trpo-2 halfcheetah-vel-maml-trpo 2 "$cheetah_steps"
run cheetah-pearl-2 halfcheetah-vel-pearl 2 "$pearl_cheetah_steps" --set stop.max_wall_seconds=0
.venv/bin/python - "$out" <<'PY'
import json, os, sys

out = sys.argv[1]
print("| run | env steps | before adapting | adapted | wall s | env steps/s | dropped |")
print("|---|---|---|---|---|---|---|")
curves = []
for name in sorted(os.listdir(out)):
    path = os.path.join(out, name, "summary.json")
    if not os.path.exists(path):
        continue
    s = json.load(open(path))
    stages = s.get("final_adaptation_returns") or [s["final_eval_return"]]
    after = f"{stages[-1]:.1f}" if len(stages) > 1 else "(no adaptation)"
    print(f"| {name} | {s['total_env_steps']} | {stages[0]:.1f} | {after} | "
          f"{s['wall_seconds']:.0f} | {s['env_steps_per_second']:.0f} | {s['rollouts_dropped']} |")
    curve = ", ".join(
        f"{e['env_steps'] // 1000}k: " + " -> ".join(f"{r:.1f}" for r in e.get("adaptation_returns", [e["mean_return"]]))
        for e in s["evaluations"])
    curves.append(f"{name}: {curve}")
print()
for c in curves:
    print(c)
PY
