"""One markdown table row for a run trained to a fixed budget, fleetrl's summary.json or a
peer's summary line alike: the leading cells given, then env steps, (with --training) the mean
return of the last 100 training episodes, return at the budget, best evaluation, wall seconds
and training env steps/s. Used by bench/minatar.sh, bench/minatar_reference.sh and bench/mujoco.sh.

    python bench/budget_row.py [--training] SUMMARY_JSON PROCESS_SECONDS CELL...
"""

import json
import sys

args = sys.argv[1:]
training = args[0] == "--training"
if training:
    args = args[1:]
path, process_s, cells = args[0], float(args[1]), args[2:]
s = json.load(open(path))
evals = s["evaluations"]
ret = lambda e: e["mean_return"] if isinstance(e, dict) else e[1]  # noqa: E731
best = max((ret(e) for e in evals), default=float("nan"))
steps = s.get("total_env_steps", s.get("env_steps"))
recent = s.get("recent_training_return")
train_cell = f" {recent:.2f} |" if training and recent is not None else " - |" if training else ""
print(f"| {' | '.join(cells)} | {steps:,} |{train_cell} {s['final_eval_return']:.1f} | {best:.1f} "
      f"| {process_s:.0f} | {s['env_steps_per_second']:.0f} |")
