"""One markdown table row for a run trained to a fixed budget, fleetrl's summary.json or an SB3
peer's summary line alike: the leading cells given, then env steps, return at the budget, best
evaluation, wall seconds and training env steps/s. Used by bench/minatar.sh and bench/mujoco.sh.

    python bench/budget_row.py SUMMARY_JSON PROCESS_SECONDS CELL...
"""

import json
import sys

path, process_s, cells = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
s = json.load(open(path))
evals = s["evaluations"]
ret = lambda e: e["mean_return"] if isinstance(e, dict) else e[1]  # noqa: E731
best = max((ret(e) for e in evals), default=float("nan"))
steps = s.get("total_env_steps", s.get("env_steps"))
print(f"| {' | '.join(cells)} | {steps:,} | {s['final_eval_return']:.1f} | {best:.1f} "
      f"| {process_s:.0f} | {s['env_steps_per_second']:.0f} |")
