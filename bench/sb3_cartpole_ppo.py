"""Stable-Baselines3 PPO on CartPole-v1 with RL-Zoo's hyperparameters, measured the way
`fleetrl train --config cartpole-ppo` measures itself: evaluate the deterministic policy on 20
episodes every 5,000 env steps, stop at mean >= 475 or 100k steps, report wall time and steps/s.

Prints one JSON line. Used by bench/cartpole_ppo.sh; needs stable-baselines3==2.9.2. Torch uses
2 threads (this machine's cores, as in shared/reference/baselines-measured-here.md) unless
SB3_TORCH_THREADS says otherwise.
"""

import json
import os
import sys
import time

T0 = time.time()

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402

TARGET, BUDGET, EVAL_EVERY, EVAL_EPISODES = 475.0, 100_000, 5_000, 20


def linear(start):
    return lambda remaining: remaining * start


class EvalAndStop(BaseCallback):
    def __init__(self, eval_env):
        super().__init__()
        self.eval_env, self.next_eval, self.evals, self.eval_seconds = eval_env, EVAL_EVERY, [], 0.0
        self.solved_at = None

    def _on_step(self):
        if self.num_timesteps < self.next_eval:
            return True
        self.next_eval += EVAL_EVERY
        t = time.time()
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
        self.eval_seconds += time.time() - t
        self.evals.append((self.num_timesteps, float(mean), time.time() - T0))
        if mean >= TARGET:
            self.solved_at = (self.num_timesteps, time.time() - T0)
            return False
        return True


def main(seed):
    torch.set_num_threads(int(os.environ.get("SB3_TORCH_THREADS", "2")))
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    eval_env = gym.make("CartPole-v1")
    eval_env.reset(seed=seed + 1_000_000)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, verbose=0)
    callback = EvalAndStop(eval_env)
    t = time.time()
    model.learn(total_timesteps=BUDGET, callback=callback)
    learn_seconds = time.time() - t
    train_seconds = learn_seconds - callback.eval_seconds
    steps = model.num_timesteps
    print(json.dumps({
        "system": "sb3-2.9.2", "label": f"sb3 seed {seed}", "seed": seed, "solved": callback.solved_at is not None,
        "env_steps": steps, "wall_seconds": time.time() - T0 if callback.solved_at is None else callback.solved_at[1],
        "env_steps_per_second": steps / train_seconds, "evaluations": callback.evals,
        "final_eval_return": callback.evals[-1][1] if callback.evals else float(np.nan),
    }))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
