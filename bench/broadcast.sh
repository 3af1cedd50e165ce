#!/usr/bin/env bash
# Weight broadcast over loopback gRPC: time for a new version of a 1M- and a 50M-parameter
# model to reach 1, 16 and 64 subscribers (received in chunks and written straight
# into each subscriber's own f32 tensors: the actor's path), f32 and f16, and in the same run
# the rate of plain TCP streams on loopback (1 stream, and as many streams as subscribers;
# and, the ratio's denominator, as many streams as subscribers each carrying one subscriber's
# bytes, right before and right after each case, the faster of the two, since a shared
# machine's load varies). Each case runs framed as the learner and actors do (`wire`:
# fleetrl_core::broadcast::wire, no user-space copy of the weights) and through tonic's codec
# and generated client (`tonic`), for comparison; with the subscribers (and the TCP readers)
# as tasks of the benchmark's process, and as processes of their own, one each, like actors.
# Then the stages of the path for one 50M f32 and f16 version. Prints three tables.
#   bash bench/broadcast.sh
#   PARAMS=1000000 SUBSCRIBERS=1,16 DTYPES=f32 FRAMINGS=wire SUBSCRIBERS_AS=tasks bash bench/broadcast.sh
# Memory: each subscriber holds its model in f32 (64 x 50M params is ~13 GB as tasks); a case
# whose subscriber processes would not fit in the available memory is skipped and says so.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -x .venv/bin/python ] || bash scripts/setup.sh >&2
cargo build --release -p fleet-learner --example broadcast_bench >&2
out=$(mktemp -d)
target/release/examples/broadcast_bench \
  --params "${PARAMS:-1000000,50000000}" --subscribers "${SUBSCRIBERS:-1,16,64}" \
  --dtype "${DTYPES:-f32,f16}" --framing "${FRAMINGS:-wire,tonic}" \
  --subscribers-as "${SUBSCRIBERS_AS:-tasks,processes}" --tcp-bytes "${TCP_BYTES:-1000000000}" | tee "$out/broadcast.jsonl" >&2
target/release/examples/broadcast_bench --stages --params 50000000 --dtype f32,f16 \
  | tee -a "$out/broadcast.jsonl" >&2
.venv/bin/python - "$out/broadcast.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
tcp = [r for r in rows if r["kind"] == "tcp"]
print("Plain TCP on loopback (same run):\n")
print("| streams | read by | MB per stream | aggregate MB/s |")
print("|---|---|---|---|")
for r in tcp:
    print(f"| {r['streams']} | {r['readers_as']} | {r['bytes_per_stream'] / 1e6:.0f} | {r['aggregate_mb_per_s']:.0f} |")
print("\nWeights to every subscriber (publish -> in the subscriber's f32 tensors):\n")
print("| params | dtype | subscribers | as | framing | MB each | first s | median s | all s | aggregate MB/s | f32-equivalent MB/s | TCP MB/s, same streams and bytes | aggregate / TCP |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["kind"] == "skipped":
        print(f"| {r['params'] / 1e6:g}M | | {r['subscribers']} | processes | skipped: {r['why']} |")
    if r["kind"] != "grpc":
        continue
    print(f"| {r['params'] / 1e6:g}M | {r['dtype']} | {r['subscribers']} | {r['subscribers_as']} | {r['framing']} | "
          f"{r['bytes_per_subscriber'] / 1e6:.1f} | {r['seconds_first']:.3f} | "
          f"{r['seconds_median']:.3f} | {r['seconds_all']:.3f} | "
          f"{r['aggregate_mb_per_s']:.0f} | {r['f32_equivalent_mb_per_s']:.0f} | "
          f"{r['tcp_mb_per_s']:.0f} | {r['aggregate_mb_per_s'] / r['tcp_mb_per_s']:.2f} |")
print("\nStages of one version to one subscriber, no network (seconds):\n")
print("| params | dtype | learner prepares (once) | learner frames per subscriber | actor writes into its tensors | env loop swaps into model |")
print("|---|---|---|---|---|---|")
for r in rows:
    if r["kind"] == "stages":
        print(f"| {r['params'] / 1e6:g}M | {r['dtype']} | {r['learner_encode_s']:.3f} | "
              f"{r['per_subscriber_framing_s']:.4f} | "
              f"{r['receive_into_tensors_s']:.3f} | {r['swap_into_model_s']:.3f} |")
PY
echo
echo "raw outputs: $out"
