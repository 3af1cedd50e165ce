"""The MinAtar authors' DQN (Young & Tian 2019, arXiv:1903.03176), written for this bench from
the specification of `examples/dqn.py` in github.com/kenjyoung/MinAtar (read at commit 3f078e5;
the script is not in the `minatar` sdist on PyPI). Our own code, not a copy; every constant is the
reference's:

- network: conv 16 filters 3x3 stride 1, ReLU, 128 ReLU units, one linear output per action;
  PyTorch's default initialisation; all 6 actions (the reference's `Environment`, not the
  minimal action sets of gymnasium's `MinAtar/<Game>-v1`); sticky actions 0.1, difficulty ramping on
- replay: 100,000 transitions, 32 sampled uniformly without replacement, one update per frame
  once more than 5,000 frames are stored
- behaviour: uniformly random for the first 5,000 frames, then epsilon-greedy with epsilon linear
  from 1.0 to 0.1 over the next 100,000 frames, then 0.1
- update: Huber (smooth L1) loss on `r + 0.99 max_a Q_target(s', a)` (0 past a terminal state),
  no double Q, no gradient clipping; centered RMSprop, lr 2.5e-4, alpha 0.95, momentum 0.95,
  eps 0.01; the target network is a hard copy every 1,000 updates
- no time limit on episodes; one frame is one env step (MinAtar skips no frames)

What this file adds, outside the algorithm: seeds (the reference seeds nothing), a frame budget
(its own is 5M), and a greedy evaluation on a separate, separately seeded env (20 episodes,
each cut at 10,000 steps as fleetrl cuts MinAtar's) every EVAL_EVERY frames and at the end, so
`fleetrl plot` draws it beside fleetrl's runs. Training episodes are logged as the reference
logs them, (frame at the episode's end, return), finished episodes only.

    python bench/minatar_reference_dqn.py GAME SEED FRAMES

GAME is a MinAtar game as fleetrl names it (Breakout, SpaceInvaders, Freeway, Asterix,
Seaquest). Prints one JSON line shaped like fleetrl's summary.json, with `episodes` and
`recent_training_return` (the mean of the last 100 training episodes, as fleetrl's summary).
Needs `minatar==1.0.15` (no dependencies beyond numpy) and torch; torch uses 1 thread unless
REF_TORCH_THREADS says otherwise, REF_EVAL_EVERY (frames, 50,000 by default) sets the
evaluation interval, and REF_ACTIONS=minimal plays the game's minimal action set (gymnasium's
`MinAtar/<Game>-v1`, fleetrl's presets) in place of the reference's six actions, to test that one
difference alone. Used by bench/minatar_reference.sh.
"""

import json
import os
import random
import re
import sys
import time

T0 = time.time()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from minatar import Environment  # noqa: E402

BATCH_SIZE = 32
REPLAY_CAPACITY = 100_000
REPLAY_START = 5_000  # frames of random actions; updates begin once more are stored
EPSILON_START, EPSILON_END, EPSILON_FRAMES = 1.0, 0.1, 100_000  # linear, after REPLAY_START
TARGET_PERIOD = 1_000  # updates between hard copies to the target network
GAMMA = 0.99
LEARNING_RATE, RMS_ALPHA, RMS_MOMENTUM, RMS_EPS = 2.5e-4, 0.95, 0.95, 0.01
EVAL_EVERY = int(os.environ.get("REF_EVAL_EVERY", "50000"))
EVAL_EPISODES, EVAL_MAX_STEPS = 20, 10_000
MINIMAL_ACTIONS = os.environ.get("REF_ACTIONS", "full") == "minimal"
RECENT_EPISODES = 100


class QNetwork(torch.nn.Module):
    def __init__(self, channels, actions):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, 16, kernel_size=3, stride=1)
        self.hidden = torch.nn.Linear(16 * 8 * 8, 128)
        self.out = torch.nn.Linear(128, actions)

    def forward(self, x):
        x = F.relu(self.conv(x)).flatten(1)
        return self.out(F.relu(self.hidden(x)))


class Replay:
    """A ring of the last `capacity` transitions, observations channel-first as uint8."""

    def __init__(self, capacity, shape):
        self.obs = np.zeros((capacity, *shape), np.uint8)
        self.next_obs = np.zeros((capacity, *shape), np.uint8)
        self.action = np.zeros(capacity, np.int64)
        self.reward = np.zeros(capacity, np.float32)
        self.terminal = np.zeros(capacity, np.float32)
        self.capacity, self.size, self.at = capacity, 0, 0

    def add(self, obs, action, reward, next_obs, terminal):
        i = self.at
        self.obs[i], self.action[i], self.reward[i] = obs, action, reward
        self.next_obs[i], self.terminal[i] = next_obs, terminal
        self.at = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, n):
        i = np.array(random.sample(range(self.size), n))
        as_float = lambda a: torch.from_numpy(a[i]).float()  # noqa: E731
        return (as_float(self.obs), torch.from_numpy(self.action[i]), torch.from_numpy(self.reward[i]),
                as_float(self.next_obs), torch.from_numpy(self.terminal[i]))


def observe(env):
    return np.ascontiguousarray(env.state().transpose(2, 0, 1), dtype=np.uint8)


def greedy(net, obs):
    with torch.no_grad():
        return int(net(torch.from_numpy(obs).float().unsqueeze(0)).argmax(1))


def epsilon(frame):
    if frame < REPLAY_START:
        return 1.0
    done = min(1.0, (frame - REPLAY_START) / EPSILON_FRAMES)
    return EPSILON_START + done * (EPSILON_END - EPSILON_START)


def update(net, target, optimizer, batch):
    obs, action, reward, next_obs, terminal = batch
    q = net(obs).gather(1, action.unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        y = reward + GAMMA * (1.0 - terminal) * target(next_obs).max(1).values
    loss = F.smooth_l1_loss(q, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def action_set(env):
    """The environment's action for each of the network's outputs."""
    return env.minimal_action_set() if MINIMAL_ACTIONS else list(range(env.num_actions()))


def evaluate(net, game, seed):
    env = Environment(game)
    env.seed(seed + 1_000_000)
    actions = action_set(env)
    returns = []
    for _ in range(EVAL_EPISODES):
        env.reset()
        total, done, steps = 0.0, False, 0
        while not done and steps < EVAL_MAX_STEPS:
            reward, done = env.act(actions[greedy(net, observe(env))])
            total, steps = total + reward, steps + 1
        returns.append(total)
    return float(np.mean(returns))


class Run:
    """The training loop's state: networks, optimiser, replay, counters and the logs."""

    def __init__(self, game, seed):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.game, self.seed = game, seed
        self.env = Environment(game)
        self.env.seed(seed)
        self.action_set = action_set(self.env)
        channels, self.actions = self.env.state_shape()[2], len(self.action_set)
        self.net, self.target = QNetwork(channels, self.actions), QNetwork(channels, self.actions)
        self.target.load_state_dict(self.net.state_dict())
        self.optimizer = torch.optim.RMSprop(self.net.parameters(), lr=LEARNING_RATE, alpha=RMS_ALPHA,
                                             eps=RMS_EPS, momentum=RMS_MOMENTUM, centered=True)
        self.replay = Replay(REPLAY_CAPACITY, (channels, 10, 10))
        self.frame, self.updates, self.episodes, self.evals, self.eval_seconds = 0, 0, [], [], 0.0

    def act(self, obs):
        if random.random() < epsilon(self.frame):
            return random.randrange(self.actions)
        return greedy(self.net, obs)

    def step(self, obs):
        """One frame: act, store, and (past the replay start) one update."""
        action = self.act(obs)
        reward, terminal = self.env.act(self.action_set[action])
        next_obs = observe(self.env)
        self.replay.add(obs, action, reward, next_obs, float(terminal))
        if self.frame > REPLAY_START:
            update(self.net, self.target, self.optimizer, self.replay.sample(BATCH_SIZE))
            self.updates += 1
            if self.updates % TARGET_PERIOD == 0:
                self.target.load_state_dict(self.net.state_dict())
        self.frame += 1
        if self.frame % EVAL_EVERY == 0:
            self.evaluate()
        return next_obs, reward, terminal

    def evaluate(self):
        t = time.time()
        mean = evaluate(self.net, self.game, self.seed)
        self.eval_seconds += time.time() - t
        self.evals.append((self.frame, mean, time.time() - T0))
        print(f"[reference] eval at {self.frame} frames: mean return {mean:.1f} over {EVAL_EPISODES} "
              f"episodes ({time.time() - T0:.0f} s)", file=sys.stderr, flush=True)

    def train(self, frames):
        while self.frame < frames:
            self.env.reset()
            obs, total, terminal = observe(self.env), 0.0, False
            while not terminal and self.frame < frames:
                obs, reward, terminal = self.step(obs)
                total += reward
            if terminal:
                self.episodes.append((self.frame, total))
        if not self.evals or self.evals[-1][0] < self.frame:
            self.evaluate()


def module_name(game):
    """`SpaceInvaders` -> `space_invaders`, the `minatar` package's module for the game."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()


def main(game, seed, frames):
    torch.set_num_threads(int(os.environ.get("REF_TORCH_THREADS", "1")))
    run = Run(module_name(game), seed)
    t = time.time()
    run.train(frames)
    train_seconds = time.time() - t - run.eval_seconds
    recent = [r for _, r in run.episodes[-RECENT_EPISODES:]]
    actions = " (minimal actions)" if MINIMAL_ACTIONS else ""
    print(json.dumps({
        "system": "minatar-dqn-reference", "label": f"reference dqn{actions} seed {seed}", "algo": "dqn",
        "env": f"MinAtar/{game}", "seed": seed, "env_steps": run.frame, "wall_seconds": time.time() - T0,
        "env_steps_per_second": run.frame / train_seconds, "updates": run.updates,
        "recent_training_return": float(np.mean(recent)) if recent else None,
        "evaluations": run.evals, "final_eval_return": run.evals[-1][1], "episodes": run.episodes,
    }))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
