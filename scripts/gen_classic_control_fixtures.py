#!/usr/bin/env python3
"""Records gymnasium trajectories of Pendulum-v1, Acrobot-v1, MountainCar-v0 and
MountainCarContinuous-v0 as fixtures for core/tests/{pendulum,acrobot,mountain_car,
mountain_car_continuous}_fixture.rs.

Same layout as scripts/gen_cartpole_fixture.py: each trajectory starts from
`gym.make(id).reset(seed=i)`, records the start and final states (`env.unwrapped.state`, as float64)
and, per step, the action, observation, reward, terminated and truncated. Continuous actions are
float32 arrays (what fleetrl's policies send), some of them outside the action box so clipping is
covered. Policies mix random actions with heuristics that reach the goal, so every fixture that can
terminate holds terminated and truncated episodes.

Usage (from the repository root):
    .venv/bin/pip install gymnasium==1.4.0
    .venv/bin/python scripts/gen_classic_control_fixtures.py
"""

import json
import os
import sys

GYMNASIUM_VERSION = "1.4.0"
N_TRAJECTORIES = 10
ACTION_SEED = 12345
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "core", "tests", "fixtures")
COMMAND = ".venv/bin/python scripts/gen_classic_control_fixtures.py"

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
    """Rounds to `digits` significant digits (float32 values survive with 9)."""
    return float(f"{float(x):.{digits}g}")


def f32_action(v):
    return np.array([v], dtype=np.float32)


# Policies: (name, fn(t, obs, rng) -> action). Continuous actions are float32 arrays.
def pendulum_policy(i):
    if i % 3 == 0:
        # Energy pumping: torque along the angular velocity, beyond the torque limit.
        return "pump", lambda t, obs, rng: f32_action(3.0 if obs[2] >= 0 else -3.0)
    if i % 3 == 1:
        return "constant", lambda t, obs, rng: f32_action(1.25)
    return "random", lambda t, obs, rng: f32_action(rng.uniform(-2.5, 2.5))


def acrobot_policy(i):
    if i % 2 == 0:
        # Torque along the second joint's velocity pumps energy and reaches the goal.
        return "pump", lambda t, obs, rng: 2 if obs[5] >= 0 else 0
    return "random", lambda t, obs, rng: int(rng.integers(0, 3))


def mountain_car_policy(i):
    if i % 3 == 0:
        return "pump", lambda t, obs, rng: 2 if obs[1] >= 0 else 0
    if i % 3 == 1:
        # Pushes left into the wall first (covers the wall stop), then pumps.
        return "left_then_pump", lambda t, obs, rng: 0 if t < 60 else (2 if obs[1] >= 0 else 0)
    return "random", lambda t, obs, rng: int(rng.integers(0, 3))


def mountain_car_continuous_policy(i):
    if i % 4 == 0:
        return "pump", lambda t, obs, rng: f32_action(1.0 if obs[1] >= 0 else -1.0)
    if i % 4 == 1:
        # Out-of-box pushes (clipped for the dynamics, not for the reward), left wall first.
        return "pump_clipped", lambda t, obs, rng: f32_action(
            -1.4 if t < 60 else (1.3 if obs[1] >= 0 else -1.3)
        )
    if i % 4 == 2:
        return "pump_partial", lambda t, obs, rng: f32_action(0.8 if obs[1] >= 0 else -0.7)
    return "random", lambda t, obs, rng: f32_action(rng.uniform(-1.5, 1.5))


ENVS = [
    ("Pendulum-v1", "pendulum_v1_gymnasium.json", pendulum_policy),
    ("Acrobot-v1", "acrobot_v1_gymnasium.json", acrobot_policy),
    ("MountainCar-v0", "mountain_car_v0_gymnasium.json", mountain_car_policy),
    (
        "MountainCarContinuous-v0",
        "mountain_car_continuous_v0_gymnasium.json",
        mountain_car_continuous_policy,
    ),
]


def state_of(env):
    return [float(v) for v in np.asarray(env.unwrapped.state, dtype=np.float64)]


def action_json(action):
    if isinstance(action, np.ndarray):
        return [float(v) for v in action]
    return int(action)


def record(env_id, policy, i, rng):
    env = gym.make(env_id)
    obs, _ = env.reset(seed=i)
    initial_state = state_of(env)
    kind, choose = policy(i)
    steps = []
    t = 0
    while True:
        action = choose(t, obs, rng)
        obs, reward, terminated, truncated, _ = env.step(action)
        steps.append(
            {
                "action": action_json(action),
                "obs": [sig(v) for v in np.asarray(obs, dtype=np.float32)],
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
            }
        )
        t += 1
        if terminated or truncated:
            break
    final_state = state_of(env)
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
    os.makedirs(FIXTURES, exist_ok=True)
    only = set(sys.argv[1:])
    for env_id, filename, policy in ENVS:
        if only and env_id not in only:
            continue
        rng = np.random.default_rng(ACTION_SEED)
        trajectories = [record(env_id, policy, i, rng) for i in range(N_TRAJECTORIES)]
        ends = [("truncated" if t["steps"][-1]["truncated"] else "terminated") for t in trajectories]
        if env_id != "Pendulum-v1":
            assert "terminated" in ends and "truncated" in ends, (env_id, ends)
        fixture = {
            "header": {
                "env_id": env_id,
                "gymnasium_version": gym.__version__,
                "numpy_version": np.__version__,
                "command": COMMAND,
                "action_seed": ACTION_SEED,
                "note": "obs are float32 rounded to 9 significant digits; initial_state and final_state are float64 exact; continuous actions are float32 arrays",
            },
            "trajectories": trajectories,
        }
        out = os.path.join(FIXTURES, filename)
        with open(out, "w") as f:
            f.write(dumps_one_step_per_line(fixture))
        lengths = [len(t["steps"]) for t in trajectories]
        print(f"wrote {out}: lengths {lengths}, ends {ends}")


if __name__ == "__main__":
    main()
