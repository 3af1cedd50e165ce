#!/usr/bin/env python3
"""Records MinAtar trajectories from the `minatar` package (through gymnasium, ids
MinAtar/Breakout-v1, MinAtar/SpaceInvaders-v1, MinAtar/Freeway-v1, MinAtar/Asterix-v1 and
MinAtar/Seaquest-v1,
sticky actions off) as fixtures for core/tests/minatar_fixture.rs, in the layout of
scripts/gen_classic_control_fixtures.py.

Each trajectory starts from `env.reset(seed=i)` and records the start state, then per step the
action, the observation (in fleetrl's channel-major [C, 10, 10] layout, as hex-packed bits),
the reward and the end flags, and the final state:
- Breakout: start [1 if the ball starts at the right edge else 0]; final [paddle, ball x,
  ball y, ball direction];
- SpaceInvaders: start [] (the game has no randomness); final [cannon, alien direction, alien
  move interval, waves cleared, cannon cooldown];
- Freeway: start []; final [chicken row, then per car: column, timer, signed speed];
- Asterix: start []; final [player column, row, entry interval, move interval, ramp timer,
  ramp index];
- Seaquest: start []; final [sub column, row, oxygen, divers held, enemy entry interval, move
  interval, ramp index, then how many shots, enemy shots, fish, enemy subs and divers].
Freeway, Asterix and Seaquest draw random numbers as they run (new car speeds, new entities): their
trajectories also hold `draws`, every number the game drew from numpy (start included) in
order, which the test feeds the native game in place of its own generator.
Policies mix random actions with a player that tracks the ball or shoots the nearest alien, so
the fixtures hold long games (a rebuilt brick wall, cleared alien waves) as well as short ones.

Usage (from the repository root):
    .venv/bin/pip install minatar==1.0.15
    .venv/bin/python scripts/gen_minatar_fixtures.py
"""

import copy
import json
import os
import sys

MINATAR_VERSION = "1.0.15"
GYMNASIUM_VERSION = "1.4.0"
N_TRAJECTORIES = 8
MAX_STEPS = 400
ACTION_SEED = 2024
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "core", "tests", "fixtures")

try:
    import importlib.metadata as metadata

    import gymnasium as gym
    import numpy as np
    from minatar.gym import register_envs
except ImportError:
    sys.exit(f".venv/bin/pip install minatar=={MINATAR_VERSION} gymnasium=={GYMNASIUM_VERSION}")

if metadata.version("minatar") != MINATAR_VERSION or gym.__version__ != GYMNASIUM_VERSION:
    sys.exit(f"need minatar=={MINATAR_VERSION} and gymnasium=={GYMNASIUM_VERSION}")

register_envs()


def breakout_policy(i):
    """Actions 0 no-op, 1 left, 2 right."""
    if i % 2 == 1:
        return "random", lambda game, rng: int(rng.integers(0, 3))

    def landing(game):
        # Play the ball forward on a copy until it is about to reach the paddle's row.
        ghost = copy.deepcopy(game)
        for _ in range(40):
            if ghost.ball_y == 8 and ghost.ball_dir in (2, 3):
                return ghost.ball_x + (1 if ghost.ball_dir == 2 else -1)
            _, done = ghost.act(0)
            if done:
                break
        return game.ball_x

    def track(game, rng):
        # Wait where the ball will come down, with a little noise so games differ.
        if game.ball_dir in (0, 1) and game.ball_y < 5 and rng.random() < 0.1:
            # The ball is on its way up: wander now and then, so the bounces (and games) vary.
            return int(rng.integers(0, 3))
        target = min(max(landing(game), 0), 9)
        if game.ball_y == 7 and game.ball_dir in (2, 3) and rng.random() < 0.5:
            # Meet the ball one column early: it then bounces straight back (the other
            # bounce sends it on sideways), so the ball does not settle into one loop.
            target = game.ball_x + (1 if game.ball_dir == 2 else -1)
            target = min(max(target, 0), 9)
        return 1 if target < game.pos else 2 if target > game.pos else 0

    return "track", track


def space_invaders_policy(i):
    """Actions 0 no-op, 1 left, 2 right, 3 fire."""
    if i % 2 == 1:
        return "random", lambda game, rng: int(rng.integers(0, 4))

    def hunt(game, rng):
        if rng.random() < 0.05:
            return int(rng.integers(0, 4))
        # Dodge a bullet about to reach the cannon, to a side it is not falling on.
        if game.e_bullet_map[7:10, game.pos].any():
            for side, action in ((game.pos - 1, 1), (game.pos + 1, 2)):
                if 0 <= side <= 9 and not game.e_bullet_map[7:10, side].any():
                    return action
        columns = [c for c in range(10) if game.alien_map[:, c].any()]
        if not columns:
            return 0
        target = min(columns, key=lambda c: abs(c - game.pos))
        if target == game.pos:
            return 3
        return 1 if target < game.pos else 2

    return "hunt", hunt


def freeway_policy(i):
    """Actions 0 no-op, 1 up, 2 down."""
    if i % 2 == 1:
        return "random", lambda game, rng: int(rng.integers(0, 3))
    # Mostly up, so crossings (and the speed draws after them) happen.
    return "up", lambda game, rng: 1 if rng.random() < 0.8 else int(rng.integers(0, 3))


def lookahead(game, rng, n_actions, preference=lambda ghost: 0):
    """The action whose one-step outcome on a copy of the game (its generator is copied too)
    ranks best: not dying first, then reward, then `preference(ghost)`; a random action one
    time in ten, so games differ. The minimal sets of Asterix and Seaquest are the package's
    first actions, so the index needs no mapping."""
    if rng.random() < 0.1:
        return int(rng.integers(0, n_actions))
    best, best_score = 0, None
    for action in rng.permutation(n_actions):
        ghost = copy.deepcopy(game)
        reward, done = ghost.act(int(action))
        score = (not done, reward, preference(ghost))
        if best_score is None or score > best_score:
            best, best_score = int(action), score
    return best


def asterix_policy(i):
    """Actions 0 no-op, 1 left, 2 up, 3 right, 4 down."""
    if i % 2 == 1:
        return "random", lambda game, rng: int(rng.integers(0, 5))
    return "survive", lambda game, rng: lookahead(game, rng, 5)


def seaquest_policy(i):
    """Actions 0 no-op, 1 left, 2 up, 3 right, 4 down, 5 fire."""
    if i % 2 == 1:
        return "random", lambda game, rng: int(rng.integers(0, 6))

    def dive(game, rng):
        # Head for the surface when the tank runs low or the sub is full, down otherwise.
        going_up = game.diver_count >= 6 or (game.oxygen < 60 and game.diver_count > 0)
        return lookahead(
            game, rng, 6, lambda ghost: -ghost.sub_y if going_up else min(ghost.sub_y, 5)
        )

    return "dive", dive


class Recorder:
    """Stands in for a game's numpy RandomState and logs every number it hands out."""

    def __init__(self, random):
        self.random = random
        self.draws = []

    def rand(self, *size):
        out = self.random.rand(*size)
        self.draws.extend(float(v) for v in np.atleast_1d(out))
        return out

    def randint(self, *args, **kwargs):
        out = self.random.randint(*args, **kwargs)
        self.draws.extend(float(v) for v in np.atleast_1d(out))
        return out

    def __deepcopy__(self, memo):
        copied = Recorder(copy.deepcopy(self.random, memo))
        copied.draws = list(self.draws)
        return copied


def breakout_start(game):
    return [1.0 if game.ball_x == 9 else 0.0]


def breakout_final(game):
    return [float(game.pos), float(game.ball_x), float(game.ball_y), float(game.ball_dir)]


def space_invaders_final(game):
    return [
        float(game.pos),
        float(game.alien_dir),
        float(game.enemy_move_interval),
        float(game.ramp_index),
        float(game.shot_timer),
    ]


def freeway_final(game):
    state = [float(game.pos)]
    for x, _, timer, speed in game.cars:
        state += [float(x), float(timer), float(speed)]
    return state


def asterix_final(game):
    return [
        float(game.player_x),
        float(game.player_y),
        float(game.spawn_speed),
        float(game.move_speed),
        float(game.ramp_timer),
        float(game.ramp_index),
    ]


def seaquest_final(game):
    counts = [game.f_bullets, game.e_bullets, game.e_fish, game.e_subs, game.divers]
    return [
        float(game.sub_x),
        float(game.sub_y),
        float(game.oxygen),
        float(game.diver_count),
        float(game.e_spawn_speed),
        float(game.move_speed),
        float(game.ramp_index),
    ] + [float(len(c)) for c in counts]


GAMES = [
    ("MinAtar/Breakout-v1", "minatar_breakout_v1.json", breakout_policy, breakout_start, breakout_final),
    (
        "MinAtar/SpaceInvaders-v1",
        "minatar_space_invaders_v1.json",
        space_invaders_policy,
        lambda game: [],
        space_invaders_final,
    ),
    ("MinAtar/Freeway-v1", "minatar_freeway_v1.json", freeway_policy, lambda game: [], freeway_final),
    ("MinAtar/Asterix-v1", "minatar_asterix_v1.json", asterix_policy, lambda game: [], asterix_final),
    ("MinAtar/Seaquest-v1", "minatar_seaquest_v1.json", seaquest_policy, lambda game: [], seaquest_final),
]
# The games whose trajectories carry their draws.
DRAWING = {"MinAtar/Freeway-v1", "MinAtar/Asterix-v1", "MinAtar/Seaquest-v1"}


def channel_major_hex(state):
    """The observation in fleetrl's [C, 10, 10] order as bits, 4 to a hex digit, first bit
    highest (a fixture of float lists would be megabytes)."""
    bits = np.transpose(state, (2, 0, 1)).reshape(-1).astype(np.uint8)
    bits = np.concatenate([bits, np.zeros((-len(bits)) % 4, dtype=np.uint8)])
    nibbles = bits.reshape(-1, 4) @ np.array([8, 4, 2, 1])
    return "".join(f"{n:x}" for n in nibbles)


def record(env_id, policy_of, start, final):
    env = gym.make(env_id, sticky_action_prob=0.0)
    rng = np.random.default_rng(ACTION_SEED)
    trajectories = []
    for i in range(N_TRAJECTORIES):
        name, policy = policy_of(i)
        env.reset(seed=i)
        game = env.unwrapped.game.env
        if env_id in DRAWING:
            # Start again with a generator that logs what the game draws, the start included.
            game.random = Recorder(game.random)
            game.reset()
        traj = {"seed": i, "policy": name, "initial_state": start(game), "steps": []}
        for _ in range(MAX_STEPS):
            action = policy(game, rng)
            obs, reward, terminated, truncated, _ = env.step(action)
            traj["steps"].append(
                {
                    "action": action,
                    "obs_hex": channel_major_hex(obs),
                    "reward": float(reward),
                    "terminated": bool(terminated),
                    "truncated": bool(truncated),
                }
            )
            if terminated or truncated:
                break
        traj["final_state"] = final(game)
        if env_id in DRAWING:
            traj["draws"] = game.random.draws
        ret = sum(s["reward"] for s in traj["steps"])
        print(f"{env_id} seed {i} ({name}): {len(traj['steps'])} steps, return {ret:.0f}")
        trajectories.append(traj)
    return trajectories


def main():
    for env_id, file, policy_of, start, final in GAMES:
        fixture = {
            "header": {
                "env_id": env_id,
                "gymnasium_version": GYMNASIUM_VERSION,
                "minatar_version": MINATAR_VERSION,
                "sticky_action_prob": 0.0,
                "command": ".venv/bin/python scripts/gen_minatar_fixtures.py",
            },
            "trajectories": record(env_id, policy_of, start, final),
        }
        path = os.path.join(FIXTURES, file)
        with open(path, "w") as f:
            json.dump(fixture, f, separators=(",", ":"))
        print(f"wrote {path} ({os.path.getsize(path) // 1024} KiB)")


if __name__ == "__main__":
    main()
