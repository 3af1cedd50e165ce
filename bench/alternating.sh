#!/usr/bin/env bash
# The actor's acting loop, plain against alternating (`actors.alternating`, rlpyt's
# alternating sampler: two groups of envs, one steps on a second thread while the policy
# computes the other's actions), in env steps per second (core/examples/acting_timing.rs: whole
# rollouts of a fresh actor-critic sampling actions, no learner). Alternation pays where
# inference and env stepping cost about the same; with a cheap policy its thread hand-offs and
# half-size batches cost more than the overlap saves.
#   bash bench/alternating.sh          # 5 s per case
#   SECONDS_PER_CASE=10 bash bench/alternating.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
cargo build --quiet --release -p fleetrl-core --features python --example acting_timing >&2
seconds="${SECONDS_PER_CASE:-5}"
export LD_LIBRARY_PATH="$(ls -d "$root"/.venv/lib/python3*/site-packages/torch/lib)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
printf '| mode | env | envs | hidden | lstm | env steps/s |\n|---|---|---:|---|---:|---:|\n'
for case in "CartPole-v1 8 64,64 0" "gym:Hopper-v5 8 64,64 0" "gym:Hopper-v5 8 256,256 256" \
  "gym:Hopper-v5 16 1024,1024 0"; do
  # shellcheck disable=SC2086
  target/release/examples/acting_timing "$seconds" $case |
    awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }'
done
