"""The Python side of bench/envs.sh: env steps per second of CartPole-v1, Pendulum-v1 and
Hopper-v5 stepped from a Python loop, with gymnasium (one env, and a SyncVectorEnv of 16 or
64 with its built-in auto-reset) and EnvPool (its own loop, and behind fleetrl's host class with
same-step auto-reset). Actions are the same
fixed cycle as core/examples/env_steps.rs. Prints tab-separated lines: system, env, envs, steps/s.

usage: python bench/envs_python.py [SECONDS] [gymnasium|envpool]
"""

import sys
import time

import numpy as np
import gymnasium as gym


def cycle(space, m, k):
    if isinstance(space, gym.spaces.Discrete):
        return (np.arange(m) + k) % space.n
    dim = int(np.prod(space.shape))
    return (((np.arange(m * dim) + k) % 5) * 0.4 - 0.8).astype(space.dtype).reshape(m, dim)


def single(env_id, seconds):
    env = gym.make(env_id)
    env.reset(seed=0)
    actions = [cycle(env.action_space, 1, k)[0] for k in range(8)]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a in actions:
            _, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                env.reset()
        steps += 8
    return steps / (time.perf_counter() - start)


def batched(env, m, space, seconds, wire=None):
    """Steps a vector env (its own auto-reset) with the fixed action cycle for `seconds`;
    `wire` sends the actions as bytes of that dtype, as fleetrl's Rust side does."""
    actions = [cycle(space, m, k) for k in range(8)]
    if wire is not None:
        actions = [a.astype(wire).tobytes() for a in actions]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a in actions:
            env.step(a)
        steps += 8 * m
    return steps / (time.perf_counter() - start)


def vector(env_id, m, seconds):
    env = gym.make_vec(env_id, num_envs=m, vectorization_mode="sync")
    env.reset(seed=0)
    return batched(env, m, env.single_action_space, seconds)


def envpool_rate(env_id, m, seconds):
    import envpool

    env = envpool.make_gymnasium(env_id, num_envs=m)
    env.reset()
    return batched(env, m, env.action_space, seconds)


def envpool_same_step_rate(env_id, m, seconds):
    """EnvPool behind fleetrl's own host class (core/src/envs/python/host.py), stepped from
    Python: EnvPool with same-step auto-reset (a step that ends episodes resets those envs at
    once), without fleetrl's Rust side. EnvPool's own loop above resets on the next step
    instead, spending that step (its action is ignored) on the reset."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "core/src/envs/python/host.py"
    spec = importlib.util.spec_from_file_location("fleetrl_host", path)
    host = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host)
    env = host.EnvPoolVector(env_id, m, {})
    env.reset(0)
    wire = np.int64 if env.act_space[0] == "discrete" else np.float32
    return batched(env, m, env.env.single_action_space, seconds, wire)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    which = sys.argv[2] if len(sys.argv) > 2 else "gymnasium"
    cases = [("CartPole-v1", 64), ("Pendulum-v1", 64), ("Hopper-v5", 16)]
    if which == "gymnasium":
        for env_id, m in cases:
            print(f"gymnasium\t{env_id}\t1\t{single(env_id, seconds):.0f}", flush=True)
            for n in sorted({16, m}):
                print(f"gymnasium SyncVectorEnv\t{env_id}\t{n}\t{vector(env_id, n, seconds):.0f}", flush=True)
        return
    import envpool  # noqa: F401

    for env_id, m in cases:
        for n in sorted({16, m}):
            try:
                rate = f"{envpool_rate(env_id, n, seconds):.0f}"
            except Exception as e:  # an env id EnvPool does not ship
                rate = f"({type(e).__name__}: not in EnvPool)"
            print(f"envpool\t{env_id}\t{n}\t{rate}", flush=True)
            try:
                rate = f"{envpool_same_step_rate(env_id, n, seconds):.0f}"
            except Exception as e:
                rate = f"({type(e).__name__}: not in EnvPool)"
            print(f"envpool, same-step reset (fleetrl's host.py from Python)\t{env_id}\t{n}\t{rate}", flush=True)


if __name__ == "__main__":
    main()
