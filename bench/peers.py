"""One peer's PPO/APPO run for bench/peers.sh, in that peer's own virtualenv (target/peers/NAME):
trains on a fixed env-step budget, watches the peer's own running mean of training-episode
returns, and prints one JSON line: env steps, wall time, training env steps/s, the first time
and env step at which that mean reached the target, and the last mean.

    python bench/peers.py sf|rllib|puffer GAME SEED BUDGET ENVS_PER_WORKER WORKERS [MAX_SECONDS]

MAX_SECONDS (default 600) ends a run early on a slow machine, as fleetrl's stop.max_wall_seconds.

GAME is `cartpole` (CartPole-v1, target 475) or `breakout` (the `minatar` package's
MinAtar/Breakout-v1, sticky actions 0.1, target 4.0); bench/peers_games.py holds the targets and
why.

Settings: each peer's own published CartPole recipe where it has one (Sample Factory's
`sf_examples/train_gym_env.py` command line: APPO, no RNN, batch 512, reward scale 0.1, no
V-trace; RLlib's `tuned_examples/ppo/cartpole_ppo.py`: lr 3e-4, 6 epochs, value loss 0.01, one
linear 32-unit layer shared by policy and value). Neither publishes a MinAtar recipe, so on
Breakout both take configs/minatar-breakout-ppo.toml's hyperparameters and the MinAtar paper's
network (16 3x3 filters, then 128 units), at a constant learning rate of 2.5e-4 (below).
PufferLib (pufferlib-core 3.0.23, its PuffeRL trainer) ships no recipe in the package and no
native CartPole, so it plays gymnasium's CartPole-v1 and the `minatar` Breakout through its
emulation and vector layers with both presets' hyperparameters and networks (details at
`puffer_run`); PUFFER_BACKEND=Serial steps its envs in the trainer's process instead of WORKERS
processes. Envs and workers are the caller's, as
fleetrl's. Torch uses one thread per process, as fleetrl's roles do.

Breakout's learning rate is 2.5e-4, constant, in every system (fleetrl is given
`algo.linear_lr_schedule=false` by bench/peers.sh): the preset decays it linearly to zero over
its budget, but the systems do not share a schedule (Sample Factory 2.1.1 has no linear decay,
PufferLib's only one is cosine), and the bench's 200k-step budget would compress the preset's 1M-
step decay fivefold. A constant rate is the one schedule all four can follow.
"""

import json
import os
import re
import shutil
import signal
import sys
import threading
import tempfile
import time

T0 = time.time()

import torch  # noqa: E402
from peers_games import GYM_IDS, TARGETS  # noqa: E402


def report(system, game, seed, curve, wall, budget_steps, train_from=(0, 0.0), extra=None):
    """curve: (env steps, wall seconds, mean training return) in time order; train_from: the env
    steps and wall second at which training began (steps/s leaves out the imports and start-up)."""
    target = TARGETS[game]
    hit = next((c for c in curve if c[2] is not None and c[2] >= target), None)
    steps = curve[-1][0] if curve else 0
    print(json.dumps({
        "system": system, "env": GYM_IDS[game], "seed": seed, "budget": budget_steps,
        "env_steps": steps, "wall_seconds": wall,
        "env_steps_per_second": (steps - train_from[0]) / max(wall - train_from[1], 1e-9),
        "solved": hit is not None,
        "steps_to_target": hit[0] if hit else None, "seconds_to_target": hit[1] if hit else None,
        "final_return": curve[-1][2] if curve else None,
        "return_measure": "running mean of training episodes",
        **(extra or {}),
    }), flush=True)


def make_minatar():
    import gymnasium as gym
    from minatar.gym import register_envs

    register_envs()
    return gym.make("MinAtar/Breakout-v1")


def float_frames(env):
    import gymnasium as gym
    import numpy as np

    space = gym.spaces.Box(0.0, 1.0, env.observation_space.shape, np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: obs.astype(np.float32), space)


# ---------------------------------------------------------------- Sample Factory 2.1.1 (APPO)
# Its workers are spawned processes: what it calls there must be importable from this module.

try:
    from sample_factory.model.encoder import Encoder
except ImportError:  # another peer's venv
    Encoder = torch.nn.Module


def sf_make_cartpole(full_env_name, cfg=None, env_config=None, render_mode=None):
    import gymnasium as gym

    return gym.make("CartPole-v1", render_mode=render_mode)


def sf_make_breakout(full_env_name, cfg=None, env_config=None, render_mode=None):
    return make_minatar()


class MinAtarEncoder(Encoder):
    """The MinAtar paper's body: conv 16x3x3 stride 1 on the [10, 10, C] grid, then 128 units."""

    def __init__(self, cfg, obs_space):
        super().__init__(cfg)
        h, w, c = obs_space["obs"].shape
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(c, 16, 3, 1), torch.nn.ReLU(), torch.nn.Flatten())
        self.fc = torch.nn.Sequential(torch.nn.Linear(16 * (h - 2) * (w - 2), 128), torch.nn.ReLU())

    def forward(self, obs_dict):
        return self.fc(self.conv(obs_dict["obs"].float().permute(0, 3, 1, 2)))

    def get_out_size(self):
        return 128


def sf_run(game, seed, budget, envs, workers, max_seconds):
    from sample_factory.algo.utils.context import global_model_factory
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import run_rl

    torch.set_num_threads(1)

    register_env(GYM_IDS[game], sf_make_cartpole if game == "cartpole" else sf_make_breakout)
    common = [
        f"--env={GYM_IDS[game]}", f"--seed={seed}", "--device=cpu", f"--num_workers={workers}",
        f"--num_envs_per_worker={envs}", f"--train_for_env_steps={budget}", f"--train_for_seconds={max_seconds}", "--algo=APPO",
        "--use_rnn=False", "--recurrence=1", "--with_vtrace=False", "--save_every_sec=100000",
        "--experiment_summaries_interval=2", "--serial_mode=False", "--async_rl=True",
        f"--train_dir={tempfile.mkdtemp(prefix='peers-sf-')}", f"--experiment=peers_{game}_{seed}",
    ]
    if game == "cartpole":
        # sf_examples/train_gym_env.py's CartPole command line (less its 20 envs a worker).
        extra = ["--batch_size=512", "--reward_scale=0.1"]
    else:
        global_model_factory().register_encoder_factory(MinAtarEncoder)
        # configs/minatar-breakout-ppo.toml: 8 envs x 128 steps a batch in 4 minibatches of 256;
        # the bench's constant learning rate (Sample Factory 2.1.1 has no linear decay).
        extra = ["--rollout=128", "--batch_size=256", "--num_batches_per_epoch=4", "--num_epochs=4",
                 "--learning_rate=2.5e-4", "--gamma=0.99",
                 "--gae_lambda=0.95", "--ppo_clip_ratio=0.2", "--exploration_loss_coeff=0.01",
                 "--value_loss_coeff=0.5", "--max_grad_norm=0.5", "--normalize_input=False"]
    argv = common + extra
    parser, _ = parse_sf_args(argv=argv)
    cfg = parse_full_cfg(parser, argv)

    # Sample Factory reports through the `rl` logger: total frames and the running mean
    # of episode returns, every few seconds.
    import logging
    curve, state = [], {"frames": 0}
    frames_re = re.compile(r"Total num frames: (\d+)")
    reward_re = re.compile(r"Avg episode reward: \[\(0, '([-0-9.eE+]+)'\)\]")

    class Watch(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if m := frames_re.search(msg):
                state["frames"] = int(m.group(1))
                if state["frames"] == 0:  # training starts after the last report of none
                    state["first"] = (0, time.time() - T0)
            if m := reward_re.search(msg):
                curve.append((state["frames"], time.time() - T0, float(m.group(1))))

    logging.getLogger("rl").addHandler(Watch())
    # Sample Factory's shutdown can take minutes on a loaded machine: the report is made when
    # the budget (or the time limit) is reached, and its processes are ended 20 s after that.
    os.setpgrp()

    def watchdog():
        while state["frames"] < budget and time.time() - T0 < max_seconds:
            time.sleep(0.5)
        state["end"] = time.time() - T0
        time.sleep(20)
        finish()
        os.killpg(0, signal.SIGKILL)

    def finish():
        if state.get("reported"):
            return
        state["reported"] = True
        wall = state.get("end", time.time() - T0)
        if state["frames"] > (curve[-1][0] if curve else 0):
            curve.append((state["frames"], wall, curve[-1][2] if curve else None))
        report("sample-factory 2.1.1 APPO", game, seed, curve, wall, budget, state.get("first", (0, 0.0)))

    threading.Thread(target=watchdog, daemon=True).start()
    run_rl(cfg)
    finish()


# ---------------------------------------------------------------- RLlib 2.60 (PPO, new API stack)

def rllib_run(game, seed, budget, envs, workers, max_seconds):
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    # MinAtar's frames are bool; RLlib's conv encoder takes them as they come and fails
    # ("Input type (bool) and bias type (float) should be the same"), so they become floats.
    register_env("minatar-breakout", lambda _cfg: float_frames(make_minatar()))
    config = (
        PPOConfig()
        .env_runners(num_env_runners=workers, num_envs_per_env_runner=envs)
        .debugging(seed=seed)
    )
    if game == "cartpole":
        # tuned_examples/ppo/cartpole_ppo.py
        config = (config.environment("CartPole-v1")
                  .training(lr=0.0003, num_epochs=6, vf_loss_coeff=0.01)
                  .rl_module(model_config=DefaultModelConfig(
                      fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)))
    else:
        # configs/minatar-breakout-ppo.toml's settings (RLlib has no MinAtar recipe), at the
        # bench's constant learning rate.
        batch = 128 * envs * max(workers, 1)
        config = (config.environment("minatar-breakout")
                  .training(lr=2.5e-4, num_epochs=4, minibatch_size=batch // 4,
                            train_batch_size_per_learner=batch, gamma=0.99, lambda_=0.95,
                            clip_param=0.2, entropy_coeff=0.01, vf_loss_coeff=0.5, grad_clip=0.5,
                            use_kl_loss=False)
                  .rl_module(model_config=DefaultModelConfig(
                      conv_filters=[[16, [3, 3], 1]], conv_activation="relu",
                      head_fcnet_hiddens=[128], head_fcnet_activation="relu", vf_share_layers=False)))
    algo = config.build_algo()
    curve, steps, started = [], 0, time.time() - T0
    while steps < budget and time.time() - T0 < max_seconds:
        result = algo.train()
        runners = result.get("env_runners", {})
        steps = int(result.get("num_env_steps_sampled_lifetime") or runners.get("num_env_steps_sampled_lifetime", 0))
        mean = runners.get("episode_return_mean")
        if mean is not None and mean == mean:
            curve.append((steps, time.time() - T0, float(mean)))
    wall = time.time() - T0
    algo.stop()
    ray.shutdown()
    report("rllib 2.60.0 PPO", game, seed, curve, wall, budget, (0, started))


# ---------------------------------------------------------------- PufferLib (pufferlib-core 3.0.23)
# pufferlib-core is Metta-AI's packaging of PufferLib 3.0: its trainer (`pufferlib.pufferl.PuffeRL`,
# the clean_pufferl PPO: V-trace-corrected GAE from its `_C` kernel, prioritized segment
# sampling, reward clipping to [-1, 1], truncations not told apart from running episodes:
# "TODO: Handle truncations"), its vector layer and its gymnasium emulation, but none of
# PufferLib's Ocean envs (no native C CartPole) and none of its config/*.ini files. So both games
# are gymnasium envs through `pufferlib.emulation.GymnasiumPufferEnv` (with PufferLib's
# `EpisodeStats` wrapper for returns) on `pufferlib.vector.Multiprocessing`: WORKERS processes of
# ENVS envs each, stepped in lockstep (batch = all envs), as PufferLib's trainer expects. Its
# workers (and its recv) poll shared memory without sleeping for 0.5 s after each step, so on a
# machine with no spare core they take CPU from the trainer; PUFFER_BACKEND=Serial runs the envs
# in the trainer's process instead.

def puffer_env(game, buf=None, seed=0):
    import gymnasium as gym
    import numpy as np
    import pufferlib.emulation
    from pufferlib.pufferlib import EpisodeStats

    if game == "cartpole":
        env = gym.make("CartPole-v1")
    else:
        # MinAtar's grid is bool, a dtype PufferLib's buffers have no torch type for: as uint8 0/1.
        env = make_minatar()
        space = env.observation_space
        env = gym.wrappers.TransformObservation(
            env, lambda obs: obs.astype(np.uint8),
            gym.spaces.Box(0, 1, space.shape, np.uint8))
    env = EpisodeStats(env)
    return pufferlib.emulation.GymnasiumPufferEnv(env=env, buf=buf, seed=seed)


class PufferPolicy(torch.nn.Module):
    """The presets' networks in PufferLib's policy interface (forward_eval / forward returning
    logits and value), initialized with its `layer_init` (orthogonal: sqrt 2 hidden, 0.01 policy,
    1 value, as fleetrl's orthogonal_init). CartPole (cartpole-ppo): separate 64-64 tanh policy
    and value MLPs. Breakout (minatar-breakout-ppo): one trunk, conv 16 3x3 stride 1 then 128 ReLU
    units, under a linear policy head and a linear value head."""

    def __init__(self, game, obs_shape, n_actions):
        super().__init__()
        from pufferlib.pytorch import layer_init

        nn = torch.nn
        if game == "cartpole":
            def mlp(out, std):
                return nn.Sequential(layer_init(nn.Linear(obs_shape[0], 64)), nn.Tanh(),
                                     layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                     layer_init(nn.Linear(64, out), std=std))
            self.trunk = nn.Identity()
            self.pi, self.vf = mlp(n_actions, 0.01), mlp(1, 1.0)
        else:
            h, w, c = obs_shape
            self.trunk = nn.Sequential(
                layer_init(nn.Conv2d(c, 16, 3, 1)), nn.ReLU(), nn.Flatten(),
                layer_init(nn.Linear(16 * (h - 2) * (w - 2), 128)), nn.ReLU())
            self.pi = layer_init(nn.Linear(128, n_actions), std=0.01)
            self.vf = layer_init(nn.Linear(128, 1), std=1.0)
        self.image = game != "cartpole"

    def forward_eval(self, obs, state=None):
        x = obs.float()
        if self.image:
            x = x.permute(0, 3, 1, 2)
        x = self.trunk(x)
        return self.pi(x), self.vf(x)

    def forward(self, obs, state=None):
        return self.forward_eval(obs, state)


class PufferWatch:
    """The vector env as PuffeRL sees it, counting on the way through. PufferLib resets an env on
    the step after its episode ended (that step's action is dropped) and its trainer counts that
    step too (`global_step`); the env steps reported here leave those resets out: an env stepped
    at a recv unless it had ended at the one before. Returns: the last 100 training episodes'
    `episode_return` from PufferLib's EpisodeStats (unclipped), as Sample Factory and RLlib
    average theirs over 100 episodes."""

    def __init__(self, vecenv, num_envs):
        from collections import deque

        self.vecenv, self.steps, self.ended = vecenv, 0, num_envs  # the first recv is the reset
        self.returns = deque(maxlen=100)

    def __getattr__(self, name):
        return getattr(self.vecenv, name)

    def recv(self):
        out = self.vecenv.recv()
        _, _, terminals, truncations, _, infos, env_ids, _ = out
        self.steps += len(env_ids) - self.ended
        self.ended = int((terminals | truncations).sum())
        for info in infos:
            if isinstance(info, dict) and "episode_return" in info:
                self.returns.append(float(info["episode_return"]))
        return out


def puffer_run(game, seed, budget, envs, workers, max_seconds):
    import functools
    import random

    import numpy as np
    import pufferlib
    import pufferlib.vector
    from pufferlib import pufferl

    torch.set_num_threads(1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # PuffeRL leaves seeding to its caller
    # Its rich dashboard redraws the terminal every 0.25 s on stdout; the JSON line goes there.
    pufferl.PuffeRL.print_dashboard = lambda self, *args, **kwargs: None

    # Its env workers and its utilization thread outlive an error or a SIGTERM (bench/peers.sh's
    # timeout) unless ended: the workers poll forever and the exit would wait on both.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    n = envs * workers
    backend = os.environ.get("PUFFER_BACKEND", "Multiprocessing")  # Serial: all envs in-process
    # No PufferLib recipe ships in pufferlib-core (PufferLib's repository has a cartpole.ini for
    # its Ocean C CartPole at 4,096 envs on a GPU, Muon optimizer, lr 0.05, minibatch 32,768),
    # so both games take the fleetrl preset's hyperparameters; PufferLib's own knobs that the
    # presets have no counterpart for keep PufferLib 3.0's config/default.ini values
    # (prio_alpha 0.8, prio_beta0 0.2, vtrace_rho_clip 1, vtrace_c_clip 1). The presets' Adam
    # (betas 0.9/0.999, eps 1e-5), not default.ini's Muon; no value clipping (vf_clip_coef
    # huge), as the presets. Its only learning-rate schedule is cosine annealing (anneal_lr) where
    # the presets decay linearly: on for CartPole, off for Breakout (the bench's constant rate);
    # it has no clip schedule (cartpole-ppo's clip decays).
    config = dict(
        env=GYM_IDS[game], seed=seed, torch_deterministic=True, device="cpu", cpu_offload=False,
        use_rnn=False, compile=False, compile_mode="default", compile_fullgraph=False,
        precision="float32", optimizer="adam", adam_beta1=0.9, adam_beta2=0.999, adam_eps=1e-5,
        total_timesteps=budget, anneal_lr=game == "cartpole", clip_coef=0.2, vf_clip_coef=1e9,
        vf_coef=0.5, max_grad_norm=0.5, prio_alpha=0.8, prio_beta0=0.2, vtrace_rho_clip=1.0,
        vtrace_c_clip=1.0,
        data_dir=tempfile.mkdtemp(prefix="peers-puffer-"), checkpoint_interval=10**9,
    )
    if game == "cartpole":
        # cartpole-ppo (RL-Zoo's): 32 steps an env, one minibatch, 20 epochs, gamma 0.98,
        # lambda 0.8, lr 1e-3, no entropy bonus.
        horizon = 32
        config.update(learning_rate=1e-3, gamma=0.98, gae_lambda=0.8, update_epochs=20,
                      ent_coef=0.0, minibatch_size=n * horizon)
    else:
        # minatar-breakout-ppo: 128 steps an env, 4 minibatches (of whole 128-step segments),
        # 4 epochs, gamma 0.99, lambda 0.95, lr 2.5e-4, entropy 0.01.
        horizon = 128
        config.update(learning_rate=2.5e-4, gamma=0.99, gae_lambda=0.95, update_epochs=4,
                      ent_coef=0.01, minibatch_size=max(n // 4, 1) * horizon)
    config.update(bptt_horizon=horizon, batch_size=n * horizon,
                  max_minibatch_size=config["minibatch_size"])

    vecenv = trainer = None
    try:
        vecenv = pufferlib.vector.make(
            functools.partial(puffer_env, game), backend=backend, num_envs=n, num_workers=workers,
            batch_size=n, overwork=True, seed=seed)  # overwork: allow workers > physical cores
        policy = PufferPolicy(game, vecenv.single_observation_space.shape,
                              vecenv.single_action_space.n)
        watch = PufferWatch(vecenv, n)
        trainer = pufferl.PuffeRL(config, watch, policy)
        trainer.save_checkpoint = lambda: None  # none of the runs here save (SF's neither)
        started = time.time() - T0
        curve = []
        # pufferl.train()'s loop, to the budget in env steps or the time limit. PufferLib's own
        # count (resets included) passes the budget first; on CartPole its cosine schedule ends
        # there and then climbs back slowly (to 2.4% of the rate when resets are a tenth of the
        # steps).
        while watch.steps < budget and time.time() - T0 < max_seconds:
            trainer.evaluate()
            if watch.returns:
                mean = sum(watch.returns) / len(watch.returns)
                curve.append((watch.steps, time.time() - T0, mean))
            trainer.train()
        wall = time.time() - T0
    finally:
        if trainer is not None:
            trainer.utilization.stop()
        if vecenv is not None:
            vecenv.close()
        shutil.rmtree(config["data_dir"], ignore_errors=True)
    if curve and watch.steps > curve[-1][0]:
        curve.append((watch.steps, wall, curve[-1][2]))
    where = f"{workers} processes" if backend == "Multiprocessing" else "in-process"
    report(f"pufferlib-core {pufferlib.__version__} PuffeRL ({backend}, {where})", game, seed,
           curve, wall, budget, (0, started),
           extra={"peer_counted_steps": trainer.global_step, "vector": backend})


if __name__ == "__main__":
    peer, game = sys.argv[1], sys.argv[2]
    seed, budget, envs, workers = map(int, sys.argv[3:7])
    max_seconds = int(sys.argv[7]) if len(sys.argv) > 7 else 600
    {"sf": sf_run, "rllib": rllib_run, "puffer": puffer_run}[peer](game, seed, budget, envs, workers, max_seconds)
