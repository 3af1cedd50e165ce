"""Joins the JSON lines of bench/replay.sh's two systems into one markdown table."""

import json
import sys


def load(path):
    with open(path) as f:
        return {(r["op"], r["item"], r["clients"]): r for r in map(json.loads, filter(str.strip, f))}


ours, theirs = load(sys.argv[1]), load(sys.argv[2])
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
