"""Stable-Baselines3 DQN on CartPole-v1 and SAC on Pendulum-v1 with RL-Zoo's hyperparameters,
measured the way `fleetrl train` measures its off-policy presets: evaluate the deterministic
policy on 20 episodes (20 envs at once) every EVAL_EVERY env steps and stop at the target return or the budget
(`target` mode), or train a fixed number of steps without evaluation (`throughput` mode).

    python bench/sb3_offpolicy.py dqn|sac SEED target|throughput [STEPS]

Prints one JSON line. Used by bench/offpolicy_presets.sh; needs stable-baselines3==2.9.2.
Torch uses 2 threads unless SB3_TORCH_THREADS says otherwise.
"""

import json
import os
import sys
import time

T0 = time.time()

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import DQN, SAC  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402

# env, target, budget, eval interval: as configs/cartpole-dqn.toml and configs/pendulum-sac.toml.
SETUPS = {
    "dqn": ("CartPole-v1", 475.0, 100_000, 2_500),
    "sac": ("Pendulum-v1", -200.0, 20_000, 1_000),
}
EVAL_EPISODES = 20


def build(algo, env, seed):
    if algo == "dqn":
        # rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1.
        return DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                   learning_starts=1_000, gamma=0.99, target_update_interval=10, train_freq=256,
                   gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
                   policy_kwargs=dict(net_arch=[256, 256]), seed=seed, verbose=0)
    # rl-baselines3-zoo hyperparams/sac.yml, Pendulum-v1 (SB3 defaults otherwise: 256x256,
    # batch 256, one gradient step per env step, automatic entropy coefficient).
    return SAC("MlpPolicy", env, learning_rate=1e-3, seed=seed, verbose=0)


class EvalAndStop(BaseCallback):
    def __init__(self, eval_env, target, every):
        super().__init__()
        self.eval_env, self.target, self.every, self.next_eval = eval_env, target, every, every
        self.evals, self.solved_at = [], None

    def _on_step(self):
        if self.num_timesteps < self.next_eval:
            return True
        self.next_eval += self.every
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=EVAL_EPISODES,
                                  deterministic=True)
        self.evals.append((self.num_timesteps, float(mean)))
        if mean >= self.target:
            self.solved_at = (self.num_timesteps, time.time() - T0)
            return False
        return True


def main(algo, seed, mode, steps):
    torch.set_num_threads(int(os.environ.get("SB3_TORCH_THREADS", "2")))
    env_id, target, budget, every = SETUPS[algo]
    env = gym.make(env_id)
    model = build(algo, env, seed)
    t = time.time()
    if mode == "throughput":
        model.learn(total_timesteps=steps or budget)
        train_s = time.time() - t
        out = {"algo": algo, "seed": seed, "mode": mode, "env_steps": model.num_timesteps,
               "train_seconds": train_s, "env_steps_per_second": model.num_timesteps / train_s}
    else:
        # EVAL_EPISODES envs, one episode each, the policy batched over them: as fleetrl
        # evaluates (a sequential single-env evaluation cost SB3 more than its training here).
        eval_env = make_vec_env(env_id, n_envs=EVAL_EPISODES, seed=seed + 1_000_000)
        callback = EvalAndStop(eval_env, target, every)
        model.learn(total_timesteps=budget, callback=callback)
        out = {"algo": algo, "seed": seed, "mode": mode, "solved": callback.solved_at is not None,
               "env_steps": model.num_timesteps, "wall_seconds": time.time() - T0,
               "steps_to_target": callback.solved_at and callback.solved_at[0],
               "evals": callback.evals}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0)
