"""Joins the JSON lines of bench/replay.sh's two systems into markdown tables: throughput and
latency per case, then each server's resident memory with its table full.

Insert rows pair the same method on both sides (`writer`: the client library's insert call
with a window of unacknowledged items; `sync`: one item confirmed at a time); sample rows pair
fleetrl's sample stream with Reverb's sample method, whichever ran."""

import json
import sys


def key(r):
    # Sampling has one method a side; inserts pair by method.
    method = r.get("method", "") if r["op"] == "insert" else ""
    return (r["op"], method, r["item"], r["clients"])


def load(path):
    with open(path) as f:
        return {key(r): r for r in map(json.loads, filter(str.strip, f))}


ours, theirs = load(sys.argv[1]), load(sys.argv[2])
memory = {k[2]: (r, theirs.get(k)) for k, r in ours.items() if k[0] == "memory"}
ours = {k: r for k, r in ours.items() if k[0] != "memory"}
print("| op | method | item | clients | fleetrl items/s (MB/s) | Reverb items/s (MB/s) | ratio | "
      "fleetrl p50 / p99 ms | Reverb p50 / p99 ms |")
print("|---|---|---|---|---|---|---|---|---|")
for k in sorted(ours):
    a, b = ours[k], theirs.get(k)
    method = a.get("method", "") if k[0] == "insert" else f"{a.get('method', '')} / {b.get('method', '') if b else '-'}"
    cell = lambda r: f"{r['items_per_s']:,.0f} ({r['mb_per_s']:,.1f})"
    lat = lambda r: f"{r['p50_ms']:.3f} / {r['p99_ms']:.2f}"
    ratio = f"{a['items_per_s'] / b['items_per_s']:.1f}x" if b and b["items_per_s"] > 0 else "-"
    print(f"| {k[0]} | {method} | {k[2]} | {k[3]} | {cell(a)} | {cell(b) if b else '-'} | {ratio} | "
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
