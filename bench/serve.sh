#!/usr/bin/env bash
# The policy server under load: requests/s and p50/p99 latency for 1, 16 and 64 concurrent
# callers (each on its own connection, one observation a request, back to back), and the mean
# batch the server ran them in; beside it, in the same run, the same checkpoint's policy acting
# in-process with tch (one observation a call, no network), and the same policy exported with
# `fleetrl export --format onnx` run in-process by onnxruntime for 1, 16 and 64 concurrent
# callers (bench/serve_onnx.py). The policy is a CartPole PPO checkpoint trained here first (a
# few seconds). Prints a Markdown table.
#   bash bench/serve.sh
#   CLIENTS=1,16 SECONDS_PER_CASE=3 WINDOW_MS=1 bash bench/serve.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -x .venv/bin/python ] || bash scripts/setup.sh >&2
cargo build --release --workspace --bins --example serve_bench >&2
out=$(mktemp -d)
target/release/fleetrl train --config cartpole-ppo --set "stop.total_env_steps=${TRAIN_STEPS:-8000}" \
  --set stop.target_return=1e9 --out "$out/run" >"$out/train.json"
ckpt=$(.venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))["checkpoint"])' "$out/run/summary.json")
metrics_port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target/release/fleet-serve --checkpoint "$ckpt" --listen 127.0.0.1:0 \
  --metrics-listen "127.0.0.1:$metrics_port" --batch-window-ms "${WINDOW_MS:-0}" >"$out/serve.out" 2>"$out/serve.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 300); do grep -q '^listening on ' "$out/serve.out" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$out/serve.out" | head -1)
[ -n "$addr" ] || { cat "$out/serve.log" >&2; exit 1; }
target/release/examples/serve_bench --addr "$addr" --checkpoint "$ckpt" \
  --metrics "127.0.0.1:$metrics_port" --clients "${CLIENTS:-1,16,64}" \
  --seconds "${SECONDS_PER_CASE:-5}" | tee "$out/serve.jsonl" >&2
target/release/fleetrl export --checkpoint "$ckpt" --format onnx --out "$out/policy.onnx" >&2
.venv/bin/python bench/serve_onnx.py "$out/policy.onnx" --clients "${CLIENTS:-1,16,64}" \
  --seconds "${SECONDS_PER_CASE:-5}" | tee -a "$out/serve.jsonl" >&2
.venv/bin/python - "$out/serve.jsonl" "$(nproc)" "${WINDOW_MS:-0}" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"CartPole PPO policy (MLP 64x64), one observation a request; {sys.argv[2]} cores, "
      f"callers, server and policy on one machine; batch window {sys.argv[3]} ms.\n")
print("| path | concurrent callers | requests/s | p50 ms | p99 ms | mean rows per forward pass |")
print("|---|---|---|---|---|---|")
for r in rows:
    batch = "" if r["mean_batch"] is None else f"{r['mean_batch']:.1f}"
    print(f"| {r['case']} | {r['clients']} | {r['requests_per_s']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {batch} |")
PY
