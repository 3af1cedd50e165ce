"""Joins the JSON lines of bench/replay.sh's two systems into markdown tables: throughput and
latency per case, then each server's resident memory with its table full."""

import json
import sys


def load(path):
    with open(path) as f:
        return {(r["op"], r["item"], r["clients"]): r for r in map(json.loads, filter(str.strip, f))}


ours, theirs = load(sys.argv[1]), load(sys.argv[2])
memory = {k[1]: (r, theirs.get(k)) for k, r in ours.items() if k[0] == "memory"}
ours = {k: r for k, r in ours.items() if k[0] != "memory"}
print("| op | item | clients | fleetrl items/s (MB/s) | Reverb items/s (MB/s) | ratio | "
      "fleetrl p50 / p99 ms | Reverb p50 / p99 ms |")
print("|---|---|---|---|---|---|---|---|")
for key in sorted(ours, key=lambda k: (k[0], k[1], k[2])):
    a, b = ours[key], theirs.get(key)
    cell = lambda r: f"{r['items_per_s']:,.0f} ({r['mb_per_s']:,.1f})"
    lat = lambda r: f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}"
    ratio = f"{a['items_per_s'] / b['items_per_s']:.1f}x" if b and b["items_per_s"] > 0 else "-"
    print(f"| {key[0]} | {key[1]} | {key[2]} | {cell(a)} | {cell(b) if b else '-'} | {ratio} | "
          f"{lat(a)} | {lat(b) if b else '-'} |")

if memory:
    print()
    print("| item | items | payload MB | fleetrl MB over idle (x payload) | "
          "Reverb MB over idle (x payload) | fleetrl / Reverb |")
    print("|---|---|---|---|---|---|")
    for item, (a, b) in sorted(memory.items()):
        cell = lambda r: f"{r['mb_over_idle']:,.0f} ({r['per_payload']:.2f}x)"
        ratio = f"{a['mb_over_idle'] / b['mb_over_idle']:.2f}" if b and b["mb_over_idle"] > 0 else "-"
        print(f"| {item} | {a['items']:,} | {a['payload_mb']:,.0f} | {cell(a)} | "
              f"{cell(b) if b else '-'} | {ratio} |")
