#!/usr/bin/env python3
"""Records CartPole-v1 trajectories from gymnasium as the fixture for core/tests/cartpole_fixture.rs.

Each trajectory starts from `gym.make("CartPole-v1").reset(seed=i)`, i in 0..N, and records the
start and final states (`env.unwrapped.state`, float64) and, per step, the action, observation, reward,
terminated and truncated. Policies mix uniform-random actions, an alternating policy, and a
balancing heuristic that survives to the 500-step truncation, so the fixture covers both ends.

Usage (from the repository root):
    .venv/bin/pip install gymnasium==1.4.0
    .venv/bin/python scripts/gen_cartpole_fixture.py
"""

import json
import os
import sys

GYMNASIUM_VERSION = "1.4.0"
N_TRAJECTORIES = 20
ACTION_SEED = 12345
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "core", "tests", "fixtures", "cartpole_v1_gymnasium.json")
COMMAND = ".venv/bin/python scripts/gen_cartpole_fixture.py"

try:
    import gymnasium as gym
    import numpy as np
except ImportError:
    sys.exit(f"gymnasium is missing: .venv/bin/pip install gymnasium=={GYMNASIUM_VERSION}")

if gym.__version__ != GYMNASIUM_VERSION:
    sys.exit(
        f"need gymnasium=={GYMNASIUM_VERSION}, found {gym.__version__}: "
        f".venv/bin/pip install gymnasium=={GYMNASIUM_VERSION}"
    )


def sig(x, digits=9):
    """Rounds to `digits` significant digits (float32 observations survive with 9)."""
    return float(f"{float(x):.{digits}g}")


def policy_kind(i):
    """Which policy drives trajectory i: mostly random, some alternating, some balancing."""
    if i % 5 == 0:
        return "heuristic"
    if i % 5 == 1:
        return "alternating"
    return "random"


def choose(kind, t, obs, rng):
    if kind == "heuristic":
        return 1 if obs[2] + 0.5 * obs[3] > 0 else 0
    if kind == "alternating":
        return t % 2
    return int(rng.integers(0, 2))


def record(i, rng):
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=i)
    initial_state = [float(v) for v in np.asarray(env.unwrapped.state, dtype=np.float64)]
    kind = policy_kind(i)
    steps = []
    t = 0
    while True:
        action = choose(kind, t, obs, rng)
        obs, reward, terminated, truncated, _ = env.step(action)
        steps.append(
            {
                "action": action,
                "obs": [sig(v) for v in np.asarray(obs, dtype=np.float32)],
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
            }
        )
        t += 1
        if terminated or truncated:
            break
    final_state = [float(v) for v in np.asarray(env.unwrapped.state, dtype=np.float64)]
    env.close()
    return {
        "seed": i,
        "policy": kind,
        "initial_state": initial_state,
        "final_state": final_state,
        "steps": steps,
    }


def dumps_one_step_per_line(fixture):
    """JSON with one step per line, so a regenerated fixture diffs readably."""
    compact = lambda v: json.dumps(v, separators=(",", ":"))
    lines = ['{"header":' + json.dumps(fixture["header"], indent=1) + ',', '"trajectories":[']
    for k, traj in enumerate(fixture["trajectories"]):
        head = {key: v for key, v in traj.items() if key != "steps"}
        lines.append(compact(head)[:-1] + ',"steps":[')
        lines.append(",\n".join(compact(step) for step in traj["steps"]))
        lines.append("]}" + ("," if k + 1 < len(fixture["trajectories"]) else ""))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def main():
    rng = np.random.default_rng(ACTION_SEED)
    trajectories = []
    for i in range(N_TRAJECTORIES):
        trajectories.append(record(i, rng))
    ends = [("truncated" if t["steps"][-1]["truncated"] else "terminated") for t in trajectories]
    assert "terminated" in ends and "truncated" in ends, ends
    fixture = {
        "header": {
            "env_id": "CartPole-v1",
            "gymnasium_version": gym.__version__,
            "numpy_version": np.__version__,
            "command": COMMAND,
            "action_seed": ACTION_SEED,
            "note": "obs are float32 rounded to 9 significant digits; initial_state and final_state are float64 exact",
        },
        "trajectories": trajectories,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(dumps_one_step_per_line(fixture))
    lengths = [len(t["steps"]) for t in trajectories]
    print(f"wrote {OUT}: {len(trajectories)} trajectories, lengths {lengths}, ends {ends}")


if __name__ == "__main__":
    main()
