"""Stable-Baselines3 TD3, SAC or PPO on a gymnasium MuJoCo env with RL-Zoo's MuJoCo
hyperparameters. TD3 and SAC (SB3's defaults for them): TD3 400x300, lr 1e-3, Gaussian action
noise 0.1; SAC 256x256, lr 3e-4, automatic entropy coefficient; both batch 256, one gradient step
per env step, 10,000 random steps before learning. PPO: RL-Zoo's tuned Hopper settings
(hyperparams/ppo.yml), VecNormalize on observations and rewards with the algorithm's gamma, as
configs/hopper-ppo.toml. Evaluates the deterministic policy on 10 episodes every 10,000 env
steps, as the presets do, and prints one JSON line shaped like fleetrl's summary.json.

    python bench/sb3_mujoco.py td3|sac|ppo ENV SEED BUDGET

Used by bench/mujoco.sh; needs stable-baselines3==2.9.2.
"""

import sys
import time

T0 = time.time()

import numpy as np  # noqa: E402
from sb3_runs import train_and_report  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import PPO, SAC, TD3  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.noise import NormalActionNoise  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

EVAL_EVERY, EVAL_EPISODES = 10_000, 10


def build(algo, env, seed):
    if algo == "td3":
        dim = env.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(dim), 0.1 * np.ones(dim))
        return TD3("MlpPolicy", env, learning_starts=10_000, action_noise=noise, batch_size=256,
                   seed=seed, verbose=0)
    if algo == "ppo":
        policy_kwargs = dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                             net_arch=dict(pi=[256, 256], vf=[256, 256]))
        return PPO("MlpPolicy", env, n_steps=512, batch_size=32, n_epochs=5, gamma=0.999,
                   gae_lambda=0.99, learning_rate=9.80828e-05, ent_coef=0.00229519, clip_range=0.2,
                   vf_coef=0.835671, max_grad_norm=0.7, policy_kwargs=policy_kwargs, seed=seed,
                   verbose=0)
    return SAC("MlpPolicy", env, learning_starts=10_000, seed=seed, verbose=0)


def main(algo, env_id, seed, budget):
    env = make_vec_env(env_id, n_envs=1, seed=seed)
    if algo == "ppo":
        env = VecNormalize(env, gamma=0.999)
    train_and_report(build(algo, env, seed), env_id, algo, seed, budget, EVAL_EVERY, EVAL_EPISODES, T0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
