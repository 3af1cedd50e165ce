"""Gymnasium's SyncVectorEnv against its AsyncVectorEnv, as fleetrl hosts them
(`[env] vectorization = "sync"` / `"async"`, through core/src/envs/python/host.py), stepped with
fixed actions: which mode pays on this machine for a given env.

    .venv/bin/python bench/gym_vector_modes.py [--envs 4] [--steps 2000] [ID ...]

Prints env steps per second for each id and mode; default ids CartPole-v1 and Hopper-v5.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "core", "src", "envs", "python"))
import host  # noqa: E402


def rate(env_id, mode, envs, steps):
    vector = host.vector(env_id, envs, {}, mode)
    vector.reset(0)
    if vector.act_space[0] == "discrete":
        actions = np.zeros(envs, dtype=np.int64).tobytes()
    else:
        dim = int(np.prod(vector.act_space[1]))
        actions = np.zeros((envs, dim), dtype=np.float32).tobytes()
    start = time.perf_counter()
    for _ in range(steps):
        vector.step(actions)
    elapsed = time.perf_counter() - start
    vector.close()
    return envs * steps / elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ids", nargs="*", default=["CartPole-v1", "Hopper-v5"])
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    print(f"| env | envs | sync steps/s | async steps/s | cores: {os.cpu_count()} |")
    print("|---|---|---|---|---|")
    for env_id in args.ids:
        sync = rate(env_id, "sync", args.envs, args.steps)
        asynchronous = rate(env_id, "async", args.envs, args.steps)
        print(f"| {env_id} | {args.envs} | {sync:,.0f} | {asynchronous:,.0f} | |", flush=True)


if __name__ == "__main__":
    main()
