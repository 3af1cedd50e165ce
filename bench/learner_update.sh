#!/usr/bin/env bash
# Learner update throughput, Atari conv model (Nature CNN, 6 actions): one PPO gradient step on
# a batch of 2048 4x84x84 uint8 frames, fleetrl on 1 and 2 data-parallel replicas, side by side
# with the same update in PyTorch eager (the project venv's torch), in the same run.
#   bash bench/learner_update.sh                      # CPU: 1 and 2 CPU replicas vs PyTorch CPU
#   DEVICE=cuda bash bench/learner_update.sh          # GPU machine: cuda:0, and cuda:0+cuda:1 if present
#   ITERS=5 BATCH=2048 bash bench/learner_update.sh
# Prints a markdown table of seconds per update and updates/s.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -x .venv/bin/python ] || bash scripts/setup.sh >&2
cargo build --release -p fleet-learner --example learner_update >&2
iters="${ITERS:-3}"; batch="${BATCH:-2048}"; device="${DEVICE:-cpu}"
bin=target/release/examples/learner_update
py=.venv/bin/python
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
echo "[bench] PyTorch eager ($py_device)..." >&2
"$py" bench/learner_update.py --device "$py_device" --batch "$batch" --iters "$iters" >"$out/pytorch.json"
for c in "${configs[@]}"; do
  echo "[bench] fleetrl --devices $c..." >&2
  "$bin" --devices "$c" --batch "$batch" --iters "$iters" >"$out/fleetrl-$c.json"
done
"$py" - "$out" <<'PY'
import glob, json, sys
rows = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/*.json"))]
base = next(r for r in rows if r["system"] == "pytorch-eager")["seconds_per_update"]
print("| system | devices | batch | s / update | updates / s | vs PyTorch time |")
print("|---|---|---|---|---|---|")
for r in rows:
    s = r["seconds_per_update"]
    print(f"| {r['system']} | {' + '.join(r['devices'])} | {r['batch']} | {s:.3f} | "
          f"{r['updates_per_second']:.3f} | {s / base:.2f}x |")
PY
echo
echo "raw outputs: $out"
