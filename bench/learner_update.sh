#!/usr/bin/env bash
# Learner update throughput, Atari conv model (Nature CNN, 6 actions): one PPO gradient step on
# a batch of 2048 4x84x84 uint8 frames, fleetrl on 1 and 2 data-parallel replicas, side by side
# with the same update in PyTorch eager (the project venv's torch), in the same run.
#   bash bench/learner_update.sh                      # CPU: 1 and 2 CPU replicas vs PyTorch CPU
#   DEVICE=cuda bash bench/learner_update.sh          # GPU machine: cuda:0, and cuda:0+cuda:1 if present
#   ITERS=5 BATCH=2048 ROUNDS=3 bash bench/learner_update.sh
#   FLEETRL_BIN_DIR=DIR PYTHON=python3 ...    # prebuilt (scripts/gpu-check.sh --pack DIR), no setup
# The systems take turns for ROUNDS rounds (a shared machine's load then hits all of them);
# prints a markdown table of the median and best seconds per update and updates/s.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ -n "${FLEETRL_BIN_DIR:-}" ]; then
  bin="$FLEETRL_BIN_DIR/learner_update"
  py="${PYTHON:-python3}"
else
  [ -x .venv/bin/python ] || bash scripts/setup.sh >&2
  cargo build --release -p fleet-learner --example learner_update >&2
  bin=target/release/examples/learner_update
  py=.venv/bin/python
fi
iters="${ITERS:-3}"; batch="${BATCH:-2048}"; device="${DEVICE:-cpu}"; rounds="${ROUNDS:-3}"
out=$(mktemp -d)
if [ "$device" = cuda ]; then
  configs=("cuda:0")
  gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())')
  [ "$gpus" -ge 2 ] && configs+=("cuda:0,cuda:1")
  py_device=cuda
else
  configs=("cpu" "cpu,cpu")
  py_device=cpu
fi
for round in $(seq "$rounds"); do
  echo "[bench] round $round: PyTorch eager ($py_device)..." >&2
  "$py" bench/learner_update.py --device "$py_device" --batch "$batch" --iters "$iters" >"$out/pytorch-$round.json"
  for c in "${configs[@]}"; do
    echo "[bench] round $round: fleetrl --devices $c..." >&2
    "$bin" --devices "$c" --batch "$batch" --iters "$iters" >"$out/fleetrl-$c-$round.json"
  done
done
"$py" - "$out" <<'PY'
import glob, json, sys
from statistics import median
runs = {}
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(f))
    runs.setdefault((r["system"], " + ".join(r["devices"]), r["batch"]), []).append(r["seconds_per_update"])
base = median(next(v for k, v in runs.items() if k[0] == "pytorch-eager"))
print("| system | devices | batch | rounds | median s / update | best s / update | updates / s (median) | vs PyTorch (median time) |")
print("|---|---|---|---|---|---|---|---|")
for (system, devices, batch), v in sorted(runs.items()):
    m = median(v)
    print(f"| {system} | {devices} | {batch} | {len(v)} | {m:.3f} | {min(v):.3f} | {1 / m:.3f} | {m / base:.2f}x |")
PY
echo
echo "raw outputs: $out"
