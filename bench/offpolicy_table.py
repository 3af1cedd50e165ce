"""Formats bench/offpolicy_presets.sh's results as two markdown tables.

    python3 bench/offpolicy_table.py RESULTS_DIR

RESULTS_DIR holds `runs.tsv`, one line per run in the order they ran:
`kind<TAB>name<TAB>seed<TAB>json path<TAB>process seconds<TAB>1-min load average`, where kind
is `fleetrl` (a fleetrl summary.json), `sb3` (bench/sb3_offpolicy.py `target` output),
`fleetrl-exact` or `sb3-exact` (throughput runs with SB3's hyperparameters).
"""

import json
import sys
from pathlib import Path

# Which SB3 run (same seed) each preset is compared with: SB3's RL-Zoo DQN on CartPole, and
# SB3's SAC (its fastest algorithm to -200 on Pendulum) for every Pendulum preset.
BASELINE = {"cartpole": "dqn", "pendulum": "sac"}


def fleetrl_to_target(s):
    target = s["target_return"]
    hit = [e for e in s["evaluations"] if target is not None and e["mean_return"] >= target]
    return (hit[0]["env_steps"], hit[0]["wall_seconds"]) if hit else (None, None)


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main(root):
    runs = [line.rstrip("\n").split("\t") for line in open(root / "runs.tsv")]
    sb3 = {}
    for kind, name, seed, path, _, _ in runs:
        if kind == "sb3":
            sb3[(name, seed)] = json.load(open(path))
    print("### Wall time to the target, fleetrl preset vs Stable-Baselines3 (RL-Zoo), same seed")
    print("| preset | seed | load | fleetrl env steps to target | fleetrl wall s to target | "
          "fleetrl process s | fleetrl env steps/s | SB3 run | SB3 env steps to target | "
          "SB3 wall s to target | ratio (fleetrl / SB3) | <= 1/5 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, name, seed, path, process_s, load in runs:
        if kind != "fleetrl":
            continue
        s = json.load(open(path))
        steps, wall = fleetrl_to_target(s)
        algo = BASELINE[name.split("-")[0]]
        base = sb3.get((algo, seed))
        base_steps = base and base["steps_to_target"]
        base_wall = base and base["solved"] and base["wall_seconds"]
        ratio = wall / base_wall if wall and base_wall else None
        meets = "-" if ratio is None else ("yes" if ratio <= 0.2 else "no")
        print(f"| {name} | {seed} | {load} | {fmt(steps, 'd')} | {fmt(wall, '.1f')} | "
              f"{float(process_s):.1f} | {s['env_steps_per_second']:.0f} | sb3 {algo} | "
              f"{fmt(base_steps, 'd')} | {fmt(base_wall or None, '.1f')} | "
              f"{fmt(ratio, '.2f')} | {meets} |")
    print()
    print("### Training throughput with SB3's exact hyperparameters (no evaluation)")
    print("| run | load | env steps | training s | env steps/s |")
    print("|---|---|---|---|---|")
    for kind, name, seed, path, process_s, load in runs:
        if kind == "fleetrl-exact":
            s = json.load(open(path))
            print(f"| fleetrl {name} | {load} | {s['total_env_steps']} | "
                  f"{s['wall_seconds']:.1f} | {s['env_steps_per_second']:.0f} |")
        elif kind == "sb3-exact":
            r = json.load(open(path))
            print(f"| sb3 {name} | {load} | {r['env_steps']} | {r['train_seconds']:.1f} | "
                  f"{r['env_steps_per_second']:.0f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
