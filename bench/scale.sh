#!/usr/bin/env bash
# Throughput against the number of actors: `fleetrl train --config cartpole-ppo` on a fixed
# env-step budget (no early stop, one evaluation at the end) with 1, 2, 4 and 8 actors, then the
# learner's own ceiling (the PPO update alone on synthetic rollouts of the sizes those runs
# trained on). Prints one markdown table: env steps/s, rollouts dropped against trained, updates,
# mean rollouts per update, mean policy lag, and the learner-only bound.
#   bash bench/scale.sh
#   ACTORS="1 2 4" BUDGET=100000 PRESET=cartpole-ppo bash bench/scale.sh
#   SETS="actors.max_policy_lag=1" bash bench/scale.sh      # extra --set for every run
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
cargo build --release --bins >&2
cargo build --release -p fleetrl-core --example update_timing >&2
actors="${ACTORS:-1 2 4 8}"
budget="${BUDGET:-200000}"
preset="${PRESET:-cartpole-ppo}"
out=$(mktemp -d)
extra=()
for s in ${SETS:-}; do extra+=(--set "$s"); done
echo "[scale] $preset, $budget env steps per run, actors: $actors (runs in $out)" >&2
for n in $actors; do
  echo "[scale] $n actor(s)..." >&2
  load=$(cut -d' ' -f1 /proc/loadavg)
  target/release/fleetrl train --config "$preset" \
    --set "actors.count=$n" --set "stop.total_env_steps=$budget" \
    --set "stop.target_return=1e9" --set "stop.max_wall_seconds=900" \
    --set "eval.interval_env_steps=100000000" ${extra[@]+"${extra[@]}"} \
    --out "$out/actors-$n" >"$out/actors-$n.log" 2>&1 ||
    { echo "[scale] the $n-actor run failed; its log: $out/actors-$n.log" >&2; tail -5 "$out/actors-$n.log" >&2; exit 1; }
  echo "$load" >"$out/actors-$n/load"
done
echo "[scale] the learner alone (synthetic rollouts)..." >&2
.venv/bin/python - "$out" $actors <<'PY'
import json, os, subprocess, sys

out, counts = sys.argv[1], [int(n) for n in sys.argv[2:]]
rows, sizes = [], set()
for n in counts:
    s = json.load(open(os.path.join(out, f"actors-{n}", "summary.json")))
    load = open(os.path.join(out, f"actors-{n}", "load")).read().strip()
    trained = s.get("rollouts_trained", 0)
    per_update = trained / s["updates"] if s["updates"] else 0.0
    sizes.add(max(1, round(per_update)))
    rows.append((n, s, trained, per_update, load))


def ceiling(rollouts):
    line = subprocess.run(
        ["target/release/examples/update_timing", "2", str(rollouts)],
        check=True, capture_output=True, text=True).stdout.splitlines()[0]
    return line


bounds = {r: ceiling(r) for r in sorted(sizes)}
print("| actors | env steps/s | rollouts dropped / trained | updates | rollouts per update "
      "| mean policy lag | load before |")
print("|---|---|---|---|---|---|---|")
for n, s, trained, per_update, load in rows:
    print(f"| {n} | {s['env_steps_per_second']:,.0f} | {s['rollouts_dropped']:,} / {trained:,} "
          f"| {s['updates']:,} | {per_update:.2f} | {s['mean_policy_lag']:.2f} | {load} |")
print()
print("Learner alone (`update_timing 2 R`: the PPO update of R rollouts on synthetic data):")
for r, line in bounds.items():
    print(f"- {r} rollout(s) per update: {line}")
PY
echo "raw outputs: $out" >&2
