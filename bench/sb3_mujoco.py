"""Stable-Baselines3 TD3 or SAC on a gymnasium MuJoCo env with RL-Zoo's MuJoCo hyperparameters
(SB3's defaults for these algorithms): TD3 400x300, lr 1e-3, Gaussian action noise 0.1; SAC
256x256, lr 3e-4, automatic entropy coefficient; both batch 256, one gradient step per env step,
10,000 random steps before learning. Evaluates the deterministic policy on 10 episodes every
10,000 env steps, as configs/hopper-td3.toml does, and prints one JSON line shaped like
fleetrl's summary.json.

    python bench/sb3_mujoco.py td3|sac ENV SEED BUDGET

Used by bench/mujoco.sh; needs stable-baselines3==2.9.2.
"""

import sys
import time

T0 = time.time()

import numpy as np  # noqa: E402
from sb3_runs import train_and_report  # noqa: E402
from stable_baselines3 import SAC, TD3  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.noise import NormalActionNoise  # noqa: E402

EVAL_EVERY, EVAL_EPISODES = 10_000, 10


def build(algo, env, seed):
    if algo == "td3":
        dim = env.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(dim), 0.1 * np.ones(dim))
        return TD3("MlpPolicy", env, learning_starts=10_000, action_noise=noise, batch_size=256,
                   seed=seed, verbose=0)
    return SAC("MlpPolicy", env, learning_starts=10_000, seed=seed, verbose=0)


def main(algo, env_id, seed, budget):
    env = make_vec_env(env_id, n_envs=1, seed=seed)
    train_and_report(build(algo, env, seed), env_id, algo, seed, budget, EVAL_EVERY, EVAL_EPISODES, T0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
