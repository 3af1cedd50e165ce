"""Stable-Baselines3 PPO on gymnasium's MountainCar-v0 with fleetrl's SparseMountainCar-v0 reward
(1 on the step that reaches the goal, 0 otherwise), with the hyperparameters of
configs/sparse-mountaincar-ppod.toml: 16 envs x 128 steps, 4 minibatches, 10 epochs, lr 1e-3,
gamma 0.99, GAE lambda 0.95, clip 0.2, entropy 0.01, observations normalised (VecNormalize).
Evaluates the deterministic policy on 20 episodes every EVAL_EVERY env steps for BUDGET steps.

Prints one JSON line. Used by bench/ppod.sh; needs stable-baselines3==2.9.2.
"""

import json
import os
import sys
import time

T0 = time.time()

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

BUDGET = int(os.environ.get("BUDGET", "100000"))
EVAL_EVERY = int(os.environ.get("EVAL_EVERY", "16384"))
EVAL_EPISODES = 20


class SparseReward(gym.Wrapper):
    def step(self, action):
        obs, _, terminated, truncated, info = self.env.step(action)
        return obs, float(terminated), terminated, truncated, info


class Evaluate(BaseCallback):
    def __init__(self, seed):
        super().__init__()
        self.next_eval, self.evals, self.eval_seconds, self.seed = EVAL_EVERY, [], 0.0, seed

    def _on_step(self):
        if self.num_timesteps < self.next_eval:
            return True
        self.next_eval += EVAL_EVERY
        t = time.time()
        env = SparseReward(gym.make("MountainCar-v0"))
        norm = self.model.get_env()
        total = 0.0
        for i in range(EVAL_EPISODES):
            obs, _ = env.reset(seed=self.seed * 1000 + len(self.evals) * EVAL_EPISODES + i)
            done = False
            while not done:
                action, _ = self.model.predict(norm.normalize_obs(obs[None]), deterministic=True)
                obs, r, term, trunc, _ = env.step(int(action[0]))
                total += r
                done = term or trunc
        self.evals.append((self.num_timesteps, total / EVAL_EPISODES))
        self.eval_seconds += time.time() - t
        return True


def main(seed):
    torch.set_num_threads(int(os.environ.get("SB3_TORCH_THREADS", "2")))
    env = VecNormalize(make_vec_env("MountainCar-v0", n_envs=16, seed=seed, wrapper_class=SparseReward),
                       norm_reward=False)
    model = PPO("MlpPolicy", env, n_steps=128, batch_size=512, n_epochs=10, learning_rate=1e-3, gamma=0.99,
                gae_lambda=0.95, clip_range=0.2, ent_coef=0.01, max_grad_norm=0.5,
                policy_kwargs={"net_arch": [64, 64]}, seed=seed, verbose=0)
    callback = Evaluate(seed)
    t = time.time()
    model.learn(total_timesteps=BUDGET, callback=callback)
    train_seconds = time.time() - t - callback.eval_seconds
    evals = callback.evals
    print(json.dumps({
        "system": "sb3-2.9.2 ppo", "seed": seed, "env_steps": model.num_timesteps,
        "wall_seconds": time.time() - T0, "env_steps_per_second": model.num_timesteps / train_seconds,
        "evaluations": evals, "final_eval_return": evals[-1][1] if evals else None,
    }))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
