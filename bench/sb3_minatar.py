"""Stable-Baselines3 PPO or DQN on MinAtar (the `minatar` package's gymnasium envs, sticky
actions 0.1 as the paper and fleetrl's native games) with the hyperparameters and network of
configs/minatar-breakout-{ppo,dqn}.toml: the MinAtar paper's 16 3x3 filters then 128 units as
the features extractor. Evaluates the deterministic policy on 20 episodes every EVAL_EVERY env
steps, as `fleetrl train` does, and prints one JSON line shaped like fleetrl's summary.json
(so `fleetrl plot` draws it beside fleetrl's runs).

    python bench/sb3_minatar.py ppo|dqn GAME SEED BUDGET

GAME is a gymnasium id such as MinAtar/Breakout-v1. Used by bench/minatar.sh; needs
stable-baselines3==2.9.2 and minatar==1.0.15. Torch uses 2 threads unless SB3_TORCH_THREADS
says otherwise.
"""

import sys
import time

T0 = time.time()

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from minatar.gym import register_envs  # noqa: E402
from sb3_runs import train_and_report  # noqa: E402
from stable_baselines3 import DQN, PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor  # noqa: E402

EVAL_EVERY, EVAL_EPISODES = 50_000, 20
# fleetrl cuts MinAtar episodes at 10,000 steps; the package sets no limit, and a Seaquest
# policy that stays on the surface would otherwise evaluate forever.
MAX_EPISODE_STEPS = 10_000
register_envs()
for spec in gym.envs.registry.values():
    if spec.id.startswith("MinAtar/"):
        spec.max_episode_steps = MAX_EPISODE_STEPS


class MinAtarCnn(BaseFeaturesExtractor):
    """The MinAtar paper's network body: conv 16x3x3 stride 1, then 128 units, ReLU after each.
    MinAtar observations are [10, 10, C] booleans; the convolution wants channels first."""

    def __init__(self, observation_space):
        super().__init__(observation_space, features_dim=128)
        h, w, c = observation_space.shape
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(c, 16, 3, 1), torch.nn.ReLU(), torch.nn.Flatten())
        self.fc = torch.nn.Sequential(torch.nn.Linear(16 * (h - 2) * (w - 2), 128), torch.nn.ReLU())

    def forward(self, obs):
        return self.fc(self.conv(obs.float().permute(0, 3, 1, 2)))


def build(algo, env, seed, budget):
    extractor = dict(features_extractor_class=MinAtarCnn, net_arch=[])
    if algo == "ppo":
        return PPO("MlpPolicy", env, n_steps=128, batch_size=256, n_epochs=4, gamma=0.99, gae_lambda=0.95,
                   learning_rate=lambda remaining: remaining * 2.5e-4, clip_range=0.2, ent_coef=0.01,
                   vf_coef=0.5, max_grad_norm=0.5, policy_kwargs=extractor, seed=seed, verbose=0)
    return DQN("MlpPolicy", env, learning_rate=2.5e-4, buffer_size=100_000, learning_starts=5_000, batch_size=32,
               gamma=0.99, train_freq=1, gradient_steps=1, target_update_interval=1_000,
               exploration_fraction=min(1.0, 100_000 / budget), exploration_initial_eps=1.0,
               exploration_final_eps=0.1, policy_kwargs=extractor, seed=seed, verbose=0)


def main(algo, game, seed, budget):
    # fleetrl's presets: PPO 8 envs (2 actors x 4); DQN 2 actors x 1 env, one update per env step.
    env = make_vec_env(game, n_envs=8 if algo == "ppo" else 1, seed=seed)
    model = build(algo, env, seed, budget)
    train_and_report(model, game, algo, seed, budget, EVAL_EVERY, EVAL_EPISODES, T0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
