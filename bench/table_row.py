"""Formats benchmark results as markdown table rows.

`table_row.py fleetrl SUMMARY_JSON SEED` reads a fleetrl summary.json; `table_row.py sb3` reads
the JSON line bench/sb3_cartpole_ppo.py prints from stdin (bench/peers.sh's tables are
bench/peers_table.py's).
"""

import json
import sys


def row(system, seed, solved, steps, wall, sps, final):
    return f"| {system} | {seed} | {solved} | {steps} | {wall:.1f} | {sps:.0f} | {final:.1f} |"


if sys.argv[1] == "fleetrl":
    s = json.load(open(sys.argv[2]))
    print(row("fleetrl", sys.argv[3], s["solved"], s["total_env_steps"], s["wall_seconds"],
              s["env_steps_per_second"], s["final_eval_return"]))
else:
    s = json.loads(sys.stdin.read())
    print(row("sb3 2.9.2", s["seed"], s["solved"], s["env_steps"], s["wall_seconds"],
              s["env_steps_per_second"], s["final_eval_return"]))
