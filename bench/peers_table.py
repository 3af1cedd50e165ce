"""Prints bench/peers.sh's tables from its output folder: one row per game, seed and system, then
the medians over seeds, then a note for each peer that did not install or run.

    peers_table.py OUT PEERS_DIR

OUT holds one folder per seed: fleetrl-GAME/ (fleetrl's --out: summary.json and tb/ events),
fleetrl-GAME.start (the unix time it was launched) and PEER-GAME.json (bench/peers.py's line).
Every system's target is on its running mean of the last 100 training episodes (fleetrl's from
its `episode_return` events, its wall time from its launch), except fleetrl's on CartPole, which
is its own stop: 20 deterministic evaluation episodes, confirmed on 100 fresh ones.
"""

import glob
import json
import os
import statistics
import sys

from peers_games import GYM_IDS, TARGETS
from tb_events import scalars

FLEETRL_EVAL = "eval (20 deterministic, confirmed on 100)"
TRAINING_MEAN = "training mean (100 episodes)"


def fleetrl_result(folder, game, seed):
    """fleetrl's run as a peer's JSON line reads, plus its last evaluation."""
    run = os.path.join(folder, f"fleetrl-{game}")
    path = os.path.join(run, "summary.json")
    if not os.path.exists(path):
        return None
    s = json.load(open(path))
    if game == "cartpole":  # fleetrl's stop: its evaluation, confirmed
        hit = (s["total_env_steps"], s["wall_seconds"]) if s["solved"] else None
        on = FLEETRL_EVAL
    else:
        launched = float(open(os.path.join(folder, f"fleetrl-{game}.start")).read())
        curve = scalars(run, "episode_return")
        hit = next(((step, wall - launched) for step, wall, mean in curve if mean >= TARGETS[game]), None)
        on = TRAINING_MEAN
    return {
        "system": "fleetrl", "seed": seed, "env_steps": s["total_env_steps"],
        "wall_seconds": s["wall_seconds"], "env_steps_per_second": s["env_steps_per_second"],
        "steps_to_target": hit and hit[0], "seconds_to_target": hit and hit[1], "target_on": on,
        "final_return": s.get("recent_training_return"), "eval": s["final_eval_return"],
    }


def peer_results(folder, game, seed):
    for path in sorted(glob.glob(os.path.join(folder, f"*-{game}.json"))):
        lines = [line for line in open(path) if line.startswith("{")]
        if lines:
            yield {**json.loads(lines[-1]), "seed": seed, "target_on": TRAINING_MEAN, "eval": None}


def number(value, fmt):
    return "-" if value is None else format(value, fmt)


def target_cell(r):
    if r["steps_to_target"] is None:
        return "-"
    return f"{r['steps_to_target']:,}, {r['seconds_to_target']:.1f}"


def runs_table(results):
    print("| env | seed | system | env steps | wall s | train env steps/s | target reached at "
          "(env steps, wall s) | target on | training mean at the end | eval at the end |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for game, r in results:
        print(f"| {GYM_IDS[game]} | {r['seed']} | {r['system']} | {r['env_steps']:,} "
              f"| {r['wall_seconds']:.1f} | {r['env_steps_per_second']:,.0f} | {target_cell(r)} "
              f"| {r['target_on']} | {number(r['final_return'], '.2f')} | {number(r['eval'], '.2f')} |")


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def medians_table(results):
    """Medians over seeds; the target's over the runs that reached it."""
    print("| env | system | runs | train env steps/s | training mean at the end | reached the target "
          "| env steps to the target | wall s to the target |")
    print("|---|---|---|---|---|---|---|---|")
    groups = {}
    for game, r in results:
        groups.setdefault((game, r["system"]), []).append(r)
    for (game, system), runs in groups.items():
        reached = [r for r in runs if r["steps_to_target"] is not None]
        steps = median([r["steps_to_target"] for r in reached])
        print(f"| {GYM_IDS[game]} | {system} | {len(runs)} "
              f"| {median([r['env_steps_per_second'] for r in runs]):,.0f} "
              f"| {number(median([r['final_return'] for r in runs]), '.2f')} "
              f"| {len(reached)} of {len(runs)} | {number(steps, ',.0f')} "
              f"| {number(median([r['seconds_to_target'] for r in reached]), '.1f')} |")


def failures(out, peers_dir):
    for status in sorted(glob.glob(os.path.join(peers_dir, "*.status"))):
        name = os.path.basename(status)[: -len(".status")]
        text = open(status).read().strip()
        runs = glob.glob(os.path.join(out, "*", f"{name}-*.json"))
        if not text.startswith("ok"):
            lines = text.splitlines()
            print(f"- {name} did not install: " + " / ".join(lines[:1] + lines[1:][-3:]))
        elif not runs:
            print(f"- {name} installed ({text}) but did not run here")
        for log in sorted(runs):
            if os.path.getsize(log) == 0:
                tail = open(log[: -len(".json")] + ".log").read().strip().splitlines()[-2:]
                print(f"- {os.path.relpath(log, out)[:-5]} failed: " + " / ".join(tail))


def main(out, peers_dir):
    seeds = sorted((d for d in os.listdir(out) if d.isdigit()), key=int)
    results = []
    for game in GYM_IDS:
        for seed in seeds:
            folder = os.path.join(out, seed)
            fleetrl = fleetrl_result(folder, game, int(seed))
            results += [(game, r) for r in [fleetrl, *peer_results(folder, game, int(seed))] if r]
    runs_table(results)
    print()
    medians_table(results)
    print()
    failures(out, peers_dir)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
