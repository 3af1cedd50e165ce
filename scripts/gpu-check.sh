#!/usr/bin/env bash
# GPU readiness in one command, on a machine with an NVIDIA GPU:
#   1. the driver sees a GPU (nvidia-smi), and PyTorch and fleetrl's libtorch both report CUDA;
#   2. the learner update bench on CUDA against PyTorch eager (bench/learner_update.sh);
#   3. `fleetrl train --config cartpole-ppo` with learner.device=cuda, and the same run on CPU.
#   4. `minatar-breakout-ppo` (the MinAtar paper's conv policy) at a fixed budget, learner on
#      the device and on the CPU: what the GPU buys a whole run where the network is not tiny;
#   5. `minatar-breakout-dqn` the same way: replay batches to the device, an update per env step,
#      replayed from a CUDA graph (learner.cuda_graph, the default) and, beside it, without;
#   6. the off-policy gradient step alone (core/examples/offpolicy_timing) for each off-policy
#      preset on a native env, on the device and on the CPU: what bounds step 5's run. On the
#      device each first checks the CUDA graph: 50 updates replayed from it against the same 50
#      as written, from the same weights, seed and batches, must end with the same parameters
#      (within 1e-4), and both are timed.
# Prints one markdown table and exits non-zero if any check failed.
#   bash scripts/gpu-check.sh
#   DEVICE=cpu bash scripts/gpu-check.sh    # rehearsal without a GPU: every step on the CPU
# Without a GPU (and without DEVICE=cpu) it says so after step 1 and exits 2.
#
# A GPU machine without Rust, network or this project's venv (a cluster node with its own
# PyTorch): build the binaries here, without the embedded Python, and carry the folder there:
#   bash scripts/gpu-check.sh --pack DIR                             # here: cargo build, strip, copy
#   FLEETRL_BIN_DIR=DIR PYTHON=python3 bash scripts/gpu-check.sh     # there: no setup, no build
# PYTHON must hold torch 2.11.0 (the libtorch tch 0.24 is built against); its torch/lib is what
# the binaries load.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
device="${DEVICE:-cuda}"
log() { printf '[gpu-check] %s\n' "$*" >&2; }
rows=()
failed=0
row() { rows+=("| $1 | $2 | $3 |"); [ "$2" = ok ] || [ "$2" = "-" ] || failed=1; }

if [ "${1:-}" = --pack ]; then
  dir="${2:?usage: scripts/gpu-check.sh --pack DIR}"
  bash scripts/setup.sh >&2 || { log "setup failed"; exit 1; }
  # No `python` feature: the binaries then need libtorch alone, not this machine's libpython.
  cargo build --release --no-default-features -p fleetrl -p fleet-learner -p fleet-actor \
    -p fleet-replay-server -p fleetrl-core --bins --example learner_update \
    --example offpolicy_timing --example pearl_probe >&2 || { log "build failed"; exit 1; }
  mkdir -p "$dir"
  # pearl_probe is not a check: it rides along for long PEARL runs on the device.
  for b in fleetrl fleet-learner fleet-actor fleet-replay-server examples/learner_update \
    examples/offpolicy_timing examples/pearl_probe; do
    cp "target/release/$b" "$dir/" && strip "$dir/$(basename "$b")" || exit 1
  done
  log "packed into $dir ($(du -sh "$dir" | cut -f1)); run there:" \
    "FLEETRL_BIN_DIR=$dir PYTHON=python3 bash scripts/gpu-check.sh"
  exit 0
fi

if [ -n "${FLEETRL_BIN_DIR:-}" ]; then
  bin="$FLEETRL_BIN_DIR"
  py="${PYTHON:-python3}"
  torch_lib=$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') \
    || { log "$py cannot import torch"; exit 1; }
  export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  bash scripts/setup.sh >&2 || { log "setup failed"; exit 1; }
  bin=target/release
  py=.venv/bin/python
fi

# 1. What sees a GPU.
if command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>&1); then
  row "nvidia-smi" ok "$(echo "$gpus" | head -1)$([ "$(echo "$gpus" | wc -l)" -gt 1 ] && echo " (+$(($(echo "$gpus" | wc -l) - 1)) more)")"
else
  row "nvidia-smi" "$([ "$device" = cpu ] && echo - || echo FAIL)" "no NVIDIA driver or GPU visible"
fi
torch_cuda=$("$py" -c 'import torch; print(torch.cuda.is_available(), torch.version.cuda, torch.cuda.device_count())' 2>&1)
read -r available cuda_version count <<<"$torch_cuda"
if [ "$available" = True ]; then
  row "PyTorch CUDA" ok "torch.cuda.is_available() True, CUDA $cuda_version, $count device(s)"
else
  row "PyTorch CUDA" "$([ "$device" = cpu ] && echo - || echo FAIL)" "torch.cuda.is_available(): $torch_cuda"
fi
if [ "$device" != cpu ] && [ "$available" != True ]; then
  printf '| check | result | detail |\n|---|---|---|\n'
  printf '%s\n' "${rows[@]}"
  log "no usable GPU here; DEVICE=cpu bash scripts/gpu-check.sh rehearses the steps on the CPU"
  exit 2
fi
if [ -z "${FLEETRL_BIN_DIR:-}" ]; then
  cargo build --release --bins >&2 &&
    cargo build --release -p fleetrl-core --example offpolicy_timing >&2 || { log "build failed"; exit 1; }
fi

# 2. The learner update, fleetrl vs PyTorch eager, on the device.
log "learner update bench on $device..."
if table=$(DEVICE="$device" ROUNDS="${ROUNDS:-2}" bash bench/learner_update.sh 2>"${TMPDIR:-/tmp}/gpu-check-update.log"); then
  while IFS= read -r line; do
    case "$line" in
      "| fleetrl "* | "| pytorch"*)
        IFS='|' read -r _ system devices _ _ median _ per_s ratio _ <<<"$line"
        row "update: $(echo $system) on $(echo $devices)" ok "$(echo $median) s per update, $(echo $per_s) updates/s, $(echo $ratio) PyTorch's time"
        ;;
    esac
  done <<<"$table"
else
  row "update bench" FAIL "see ${TMPDIR:-/tmp}/gpu-check-update.log"
fi

# 3. A whole run with the learner on the device, then on the CPU for comparison.
train() {
  local preset=$1 on=$2 out label="${LABEL:-}"
  shift 2
  out=$(mktemp -d)
  log "fleetrl train --config $preset --set learner.device=$on $*..."
  if "$bin/fleetrl" train --config "$preset" --set "learner.device=$on" "$@" --out "$out" \
    >"$out.log" 2>&1; then
    row "$preset, learner on $on$label" ok "$("$py" - "$out" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
print("solved {} at {:,} env steps, eval {:.1f}, {:,.0f} env steps/s, {:.1f} s".format(
    s["solved"], s["total_env_steps"], s["final_eval_return"], s["env_steps_per_second"],
    s["wall_seconds"]))
PY
)"
  else
    row "$preset, learner on $on$label" FAIL "exit $?; log $out.log: $(grep -m1 'error' "$out.log")"
  fi
}
on="$([ "$device" = cpu ] && echo cpu || echo cuda)"
train cartpole-ppo "$on"
[ "$device" = cpu ] || train cartpole-ppo cpu
# 4. A conv policy, where the learner's device matters; a fixed budget, no early stop.
minatar=(--set "stop.total_env_steps=${MINATAR_STEPS:-300000}")
train minatar-breakout-ppo "$on" "${minatar[@]}"
[ "$device" = cpu ] || train minatar-breakout-ppo cpu "${minatar[@]}"
# 5. Off-policy: replay batches sampled over gRPC and moved to the device, an update per env step.
dqn=(--set "stop.total_env_steps=${DQN_STEPS:-20000}" --set algo.replay.min_size=1000
  --set algo.explore.epsilon_decay_steps=10000 --set eval.interval_env_steps=10000)
train minatar-breakout-dqn "$on" "${dqn[@]}"
if [ "$device" != cpu ]; then
  LABEL=", no CUDA graph" train minatar-breakout-dqn "$on" "${dqn[@]}" --set learner.cuda_graph=false
  train minatar-breakout-dqn cpu "${dqn[@]}"
fi

# 6. The gradient step alone, without the pipeline around it.
timing="$bin/offpolicy_timing"
[ -n "${FLEETRL_BIN_DIR:-}" ] || timing=target/release/examples/offpolicy_timing
for preset in ${TIMING_PRESETS:-minatar-breakout-dqn cartpole-dqn cartpole-dqn-per pendulum-sac pendulum-td3 pendulum-ddpg point-robot-sparse-pearl}; do
  for d in "$on" $([ "$device" = cpu ] || echo cpu); do
    log "offpolicy_timing $preset learner.device=$d..."
    lines=$(RUST_BACKTRACE=0 "$timing" "$preset" "learner.device=$d" 2>&1)
    line=$(grep -m1 -E 'update \(batch|Error|panicked' <<<"$lines")
    case "$line" in
      *"update (batch"*)
        row "$preset update alone, on $d" ok "$(sed 's/.*update (batch \([0-9]*\)) \([0-9.]*\) ms.*/\2 ms per update, batch \1/' <<<"$line")"
        ;;
      *) row "$preset update alone, on $d" FAIL "$line" ;;
    esac
    graph=$(grep -m1 'graph vs as written' <<<"$lines")
    if [ -n "$graph" ]; then
      diff=$(sed 's/.*largest parameter difference \([0-9.e+-]*\).*/\1/' <<<"$graph")
      detail=$(sed 's/.*| update \([0-9.]*\) ms replayed, \([0-9.]*\) ms as written.*/\1 ms replayed, \2 ms as written/' <<<"$graph")
      if awk -v d="$diff" 'BEGIN { exit !(d <= 1e-4) }'; then
        row "$preset CUDA graph vs as written" ok "$detail; parameters after 50 updates within $diff"
      else
        row "$preset CUDA graph vs as written" FAIL "parameters after 50 updates differ by $diff; $detail"
      fi
    fi
  done
done

printf '| check | result | detail |\n|---|---|---|\n'
printf '%s\n' "${rows[@]}"
exit "$failed"
