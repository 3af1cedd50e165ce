"""Prints the learning curves of bench/ppod.sh as a markdown table: one row per run, one column
per evaluation point (env steps), each cell the mean deterministic return over 20 episodes.

Arguments: `LABEL=PATH` pairs, PATH a fleetrl summary.json or a file holding the JSON line
bench/sb3_sparse_mountaincar_ppo.py prints.
"""

import json
import sys


def curve(path):
    s = json.load(open(path))
    evals = s["evaluations"]
    if evals and isinstance(evals[0], dict):
        points = [(e["env_steps"], e["mean_return"]) for e in evals]
    else:
        points = [tuple(e) for e in evals]
    return s, points


def first_solved(points, target=0.9):
    return next((steps for steps, ret in points if ret >= target), None)


print("| run | first eval >= 0.9 at env steps | env steps/s | curve (env steps: mean eval return) |")
print("|---|---|---|---|")
for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    s, points = curve(path)
    solved = first_solved(points)
    cells = ", ".join(f"{steps // 1000}k: {ret:.2f}" for steps, ret in points)
    print(f"| {label} | {solved if solved is not None else 'never'} | {s['env_steps_per_second']:.0f} | {cells} |")
