"""What the Stable-Baselines3 peers of the learning benches share: evaluate the deterministic
policy every `every` env steps as `fleetrl train` does, and print one JSON line shaped like
fleetrl's summary.json (so `fleetrl plot` draws it beside fleetrl's runs). Used by
bench/sb3_minatar.py and bench/sb3_mujoco.py.
"""

import json
import os
import sys
import time

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize, sync_envs_normalization


class Evaluate(BaseCallback):
    def __init__(self, eval_env, every, episodes, t0):
        super().__init__()
        self.eval_env, self.every, self.episodes, self.t0 = eval_env, every, episodes, t0
        self.next_eval, self.evals, self.eval_seconds = every, [], 0.0

    def evaluate(self):
        t = time.time()
        # A VecNormalize-wrapped run is evaluated on the training statistics, raw rewards.
        sync_envs_normalization(self.model.get_env(), self.eval_env)
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.episodes, deterministic=True)
        self.eval_seconds += time.time() - t
        self.evals.append((self.num_timesteps, float(mean), time.time() - self.t0))
        # Progress as fleetrl's launcher gives it: runs take minutes to hours here.
        print(f"[sb3] eval at {self.num_timesteps} steps: mean return {mean:.1f} over "
              f"{self.episodes} episodes ({time.time() - self.t0:.0f} s)", file=sys.stderr, flush=True)

    def _on_step(self):
        if self.num_timesteps >= self.next_eval:
            self.next_eval += self.every
            self.evaluate()
        return True


def train_and_report(model, env_id, algo, seed, budget, every, episodes, t0):
    """Trains `model` for `budget` env steps with evaluations on a separately seeded env, then
    prints the summary line. Torch uses 2 threads unless SB3_TORCH_THREADS says otherwise."""
    torch.set_num_threads(int(os.environ.get("SB3_TORCH_THREADS", "2")))
    eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 1_000_000)
    if isinstance(model.get_env(), VecNormalize):
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
    callback = Evaluate(eval_env, every, episodes, t0)
    t = time.time()
    model.learn(total_timesteps=budget, callback=callback)
    if not callback.evals or callback.evals[-1][0] < model.num_timesteps:
        callback.evaluate()
    train_seconds = time.time() - t - callback.eval_seconds
    print(json.dumps({
        "system": "sb3-2.9.2", "label": f"sb3 {algo} seed {seed}", "algo": algo, "env": env_id, "seed": seed,
        "env_steps": model.num_timesteps, "wall_seconds": time.time() - t0,
        "env_steps_per_second": model.num_timesteps / train_seconds, "evaluations": callback.evals,
        "final_eval_return": callback.evals[-1][1] if callback.evals else float(np.nan),
    }))
