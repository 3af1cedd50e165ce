"""Formats benchmark results as markdown table rows.

`table_row.py fleetrl SUMMARY_JSON SEED` reads a fleetrl summary.json; `table_row.py sb3` reads
the JSON line bench/sb3_cartpole_ppo.py prints from stdin; `table_row.py peers OUT PEERS_DIR`
prints bench/peers.sh's whole table from its output folder (fleetrl-GAME/summary.json and the
PEER-GAME.json lines of bench/peers.py), then a note for each peer that did not install or run.
"""

import glob
import json
import os
import sys


def row(system, seed, solved, steps, wall, sps, final):
    return f"| {system} | {seed} | {solved} | {steps} | {wall:.1f} | {sps:.0f} | {final:.1f} |"



def peers_table(out, peers_dir):
    print("| env | system | env steps | wall s | train env steps/s | target reached at (env steps, wall s) "
          "| return at the end | measured on |")
    print("|---|---|---|---|---|---|---|---|")
    for game, env in [("cartpole", "CartPole-v1"), ("breakout", "MinAtar/Breakout-v1")]:
        path = os.path.join(out, f"fleetrl-{game}", "summary.json")
        if os.path.exists(path):
            s = json.load(open(path))
            hit = f"{s['total_env_steps']:,}, {s['wall_seconds']:.1f}" if s["solved"] else "-"
            print(f"| {env} | fleetrl | {s['total_env_steps']:,} | {s['wall_seconds']:.1f} "
                  f"| {s['env_steps_per_second']:,.0f} | {hit} | {s['final_eval_return']:.1f} "
                  f"| 20 deterministic eval episodes |")
        for path in sorted(glob.glob(os.path.join(out, f"*-{game}.json"))):
            lines = [line for line in open(path) if line.startswith("{")]
            if not lines:
                continue
            r = json.loads(lines[-1])
            hit = f"{r['steps_to_target']:,}, {r['seconds_to_target']:.1f}" if r["solved"] else "-"
            final = "-" if r["final_return"] is None else f"{r['final_return']:.1f}"
            print(f"| {env} | {r['system']} | {r['env_steps']:,} | {r['wall_seconds']:.1f} "
                  f"| {r['env_steps_per_second']:,.0f} | {hit} | {final} | {r['return_measure']} |")
    print()
    for status in sorted(glob.glob(os.path.join(peers_dir, "*.status"))):
        name = os.path.basename(status)[: -len(".status")]
        text = open(status).read().strip()
        if not text.startswith("ok"):
            print(f"- {name} did not install: " + " / ".join(text.splitlines()[:1] + text.splitlines()[-3:]))
        elif not glob.glob(os.path.join(out, f"{name}-*.json")):
            print(f"- {name} installed ({text}) but has no runner in bench/peers.py")
        for log in sorted(glob.glob(os.path.join(out, f"{name}-*.json"))):
            if os.path.getsize(log) == 0:
                tail = open(log[: -len(".json")] + ".log").read().strip().splitlines()[-2:]
                print(f"- {os.path.basename(log)[:-5]} failed: " + " / ".join(tail))


if sys.argv[1] == "peers":
    peers_table(sys.argv[2], sys.argv[3])
elif sys.argv[1] == "fleetrl":
    s = json.load(open(sys.argv[2]))
    print(row("fleetrl", sys.argv[3], s["solved"], s["total_env_steps"], s["wall_seconds"],
              s["env_steps_per_second"], s["final_eval_return"]))
else:
    s = json.loads(sys.stdin.read())
    print(row("sb3 2.9.2", s["seed"], s["solved"], s["env_steps"], s["wall_seconds"],
              s["env_steps_per_second"], s["final_eval_return"]))
