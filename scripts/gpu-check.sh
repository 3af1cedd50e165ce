#!/usr/bin/env bash
# GPU readiness in one command, on a machine with an NVIDIA GPU:
#   1. the driver sees a GPU (nvidia-smi), and PyTorch and fleetrl's libtorch both report CUDA;
#   2. the learner update bench on CUDA against PyTorch eager (bench/learner_update.sh);
#   3. `fleetrl train --config cartpole-ppo` with learner.device=cuda, and the same run on CPU.
# Prints one markdown table and exits non-zero if any check failed.
#   bash scripts/gpu-check.sh
#   DEVICE=cpu bash scripts/gpu-check.sh    # rehearsal without a GPU: every step on the CPU
# Without a GPU (and without DEVICE=cpu) it says so after step 1 and exits 2.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
device="${DEVICE:-cuda}"
log() { printf '[gpu-check] %s\n' "$*" >&2; }
rows=()
failed=0
row() { rows+=("| $1 | $2 | $3 |"); [ "$2" = ok ] || [ "$2" = "-" ] || failed=1; }

bash scripts/setup.sh >&2 || { log "setup failed"; exit 1; }
py=.venv/bin/python

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
cargo build --release --bins >&2 || { log "build failed"; exit 1; }

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
  local on=$1 out
  out=$(mktemp -d)
  log "fleetrl train --config cartpole-ppo --set learner.device=$on..."
  if target/release/fleetrl train --config cartpole-ppo --set "learner.device=$on" --out "$out" \
    >"$out.log" 2>&1; then
    row "cartpole-ppo, learner on $on" ok "$("$py" - "$out" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
print("solved {} at {:,} env steps, eval {:.1f}, {:,.0f} env steps/s, {:.1f} s".format(
    s["solved"], s["total_env_steps"], s["final_eval_return"], s["env_steps_per_second"],
    s["wall_seconds"]))
PY
)"
  else
    row "cartpole-ppo, learner on $on" FAIL "exit $?; log $out.log: $(grep -m1 'error' "$out.log")"
  fi
}
train "$([ "$device" = cpu ] && echo cpu || echo cuda)"
[ "$device" = cpu ] || train cpu

printf '| check | result | detail |\n|---|---|---|\n'
printf '%s\n' "${rows[@]}"
exit "$failed"
