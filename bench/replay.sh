#!/usr/bin/env bash
# Replay server side by side with DeepMind Reverb 0.14 (TensorFlow 2.15.1), in the same run:
# insert and sample throughput (items/s, MB/s) and p50/p99 latency over loopback gRPC, with
# 1, 8 and 64 concurrent writers and 1 and 8 samplers, for CartPole-sized transitions and
# Atari-sized items (4x84x84 uint8). Inserts run two ways on both sides, with the same latency:
# `writer`, the client library's insert call with up to 100 items unacknowledged (fleetrl's
# `Writer::insert`, Reverb's `create_item`), and `sync`, one item confirmed at a time (the
# round trip). Prints a markdown table with the ratio fleetrl / Reverb.
#   bash bench/replay.sh                       # 5 s per case
#   SECONDS_PER_CASE=10 bash bench/replay.sh
#   BEFORE=/path/to/replay_bench bash bench/replay.sh   # also an older build's writer inserts,
#                                                      # in the same run, as a second table
# Installs Reverb into bench/.venv-reverb the first time (about 2 GB, a few minutes).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
cargo build --release --workspace --example replay_bench >&2
reverb_py="$(bash bench/setup_reverb.sh)"
seconds="${SECONDS_PER_CASE:-5}"
out=$(mktemp -d)
if [ -n "${BEFORE:-}" ]; then
  echo "[bench] the older build's writer cases ($BEFORE)..." >&2
  "$BEFORE" --seconds "$seconds" --insert-method writer --samplers "" >"$out/before.jsonl"
fi
echo "[bench] fleetrl cases ($seconds s each)..." >&2
target/release/examples/replay_bench --seconds "$seconds" --insert-method writer,sync >"$out/fleetrl.jsonl"
echo "[bench] Reverb cases ($seconds s each)..." >&2
"$reverb_py" bench/reverb_replay.py --seconds "$seconds" >"$out/reverb.jsonl"
"$reverb_py" bench/reverb_replay.py --seconds "$seconds" --insert-method sync --samplers "" >>"$out/reverb.jsonl"
.venv/bin/python bench/replay_table.py "$out/fleetrl.jsonl" "$out/reverb.jsonl"
if [ -n "${BEFORE:-}" ]; then
  echo
  echo "The older build ($BEFORE) against Reverb, same run:"
  echo
  .venv/bin/python bench/replay_table.py "$out/before.jsonl" "$out/reverb.jsonl"
fi
echo
echo "raw outputs: $out"
