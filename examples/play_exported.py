"""Plays a policy exported by `fleetrl export` in gymnasium, with PyTorch or onnxruntime only.

    .venv/bin/python examples/play_exported.py policy.pt --env CartPole-v1 --episodes 20 --seed 0
    .venv/bin/python examples/play_exported.py policy.onnx policy.pt --env CartPole-v1

Episode i starts from env seed `seed + i`, as `fleetrl eval --seed` plays them; continuous
actions are clipped to the action space, as fleetrl's envs clip them. Prints one JSON line per
file with its mean return. Feed-forward policies exported with the deterministic action (the
default).
"""

import argparse
import json

import gymnasium as gym
import numpy as np


def load(path: str):
    """A function from a batch of observations [N, D] (f32) to actions."""
    if path.endswith(".onnx"):
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        return lambda obs: session.run(None, {"obs": obs})[0]
    import torch

    module = torch.jit.load(path)
    return lambda obs: module(torch.from_numpy(obs)).numpy()


def play(policy, env_id: str, episodes: int, seed: int) -> list[float]:
    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, total = False, 0.0
        while not done:
            action = policy(np.asarray(obs, dtype=np.float32).reshape(1, -1))[0]
            if isinstance(env.action_space, gym.spaces.Box):
                action = np.clip(action, env.action_space.low, env.action_space.high)
            else:
                action = int(action)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="+", help=".pt (TorchScript) or .onnx files")
    parser.add_argument("--env", required=True, help="a gymnasium id, e.g. CartPole-v1")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for path in args.policies:
        returns = play(load(path), args.env, args.episodes, args.seed)
        mean = sum(returns) / len(returns)
        print(json.dumps({"policy": path, "mean_return": mean, "returns": returns}))


if __name__ == "__main__":
    main()
