#!/usr/bin/env bash
# How many updates an off-policy actor's policy trails the learner (bench/policy_lag.py reads
# it off the roles' metrics), for a preset's pipeline as it ships and in lockstep
# (`algo.replay.items_per_request=1`, `algo.replay.error_buffer` at two batches,
# `algo.publish_interval=1`), one run each, one after the other. SB3's step-then-update loop
# trails by 0 or 1 update by construction.
#   bash bench/policy_lag.sh                               # halfcheetah-td3, 16k env steps
#   PRESET=walker2d-sac STEPS=20000 bash bench/policy_lag.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
cargo build --release --workspace --bins >&2
preset=${PRESET:-halfcheetah-td3}
steps=${STEPS:-16000}
batch=$(sed -n 's/^batch_size = \([0-9_]*\)$/\1/p' "configs/$preset.toml" | tr -d _)
echo "[bench] $preset as it ships, $steps env steps" >&2
.venv/bin/python bench/policy_lag.py "$preset" "$steps"
echo "[bench] $preset in lockstep, $steps env steps" >&2
.venv/bin/python bench/policy_lag.py "$preset" "$steps" algo.replay.items_per_request=1 \
  "algo.replay.error_buffer=$((2 * batch))" algo.publish_interval=1
