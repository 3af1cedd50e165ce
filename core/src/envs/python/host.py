"""fleetrl's side of the gymnasium bridge (core/src/envs/python): made once per process by the
Rust code, then called once per reset and once per step (of one env, or of a whole vector env).

Observations come back as C-contiguous float32 arrays that Rust copies through the buffer
protocol; Dict/Tuple/MultiDiscrete/MultiBinary observation spaces are flattened to one Box.
"""

import numpy as np
import gymnasium as gym
from gymnasium import spaces

FLATTENED = (spaces.Dict, spaces.Tuple, spaces.MultiDiscrete, spaces.MultiBinary)


def import_namespace(env_id):
    """Registers the envs of a namespace that gymnasium does not import by itself."""
    if env_id.startswith("ALE/"):
        try:
            import ale_py
        except ImportError as e:
            raise ImportError(
                f"`{env_id}` needs ale-py: run `.venv/bin/pip install ale-py` ({e})"
            ) from e
        gym.register_envs(ale_py)
    if env_id.startswith("MinAtar/"):
        try:
            from minatar.gym import register_envs
        except ImportError as e:
            raise ImportError(
                f"`{env_id}` needs the minatar package: run `.venv/bin/pip install minatar` ({e})"
            ) from e
        if env_id not in gym.registry:
            register_envs()


def channels_first(env):
    """MinAtar grids come as [10, 10, C]; fleetrl's conv encoder reads [C, H, W], as the native
    MinAtar games give them."""
    space = env.observation_space
    shape = (space.shape[2], space.shape[0], space.shape[1])
    return gym.wrappers.TransformObservation(
        env,
        lambda obs: np.transpose(obs, (2, 0, 1)),
        spaces.Box(0.0, 1.0, shape=shape, dtype=np.float32),
    )


def wrappers_for(env_id, observation_space):
    """The Python wrappers an env needs before fleetrl reads it."""
    if isinstance(observation_space, FLATTENED):
        return [gym.wrappers.FlattenObservation]
    if env_id.startswith("MinAtar/"):
        return [channels_first]
    return []


def describe(space, what):
    """('discrete', n, start) or ('box', shape, low, high) for a space fleetrl supports."""
    if isinstance(space, spaces.Discrete):
        return ("discrete", int(space.n), int(space.start))
    if isinstance(space, spaces.Box):
        return (
            "box",
            [int(d) for d in space.shape],
            np.asarray(space.low, dtype=np.float32).ravel().tolist(),
            np.asarray(space.high, dtype=np.float32).ravel().tolist(),
        )
    raise TypeError(
        f"{what} space {space} is not supported: fleetrl takes Box and Discrete action spaces "
        "(Dict, Tuple, MultiDiscrete and MultiBinary observations are flattened)"
    )


def flat(obs):
    return np.ascontiguousarray(obs, dtype=np.float32)


def make_one(env_id, kwargs):
    """`gym.make` with the wrappers fleetrl needs."""
    import_namespace(env_id)
    env = gym.make(env_id, **kwargs)
    for wrapper in wrappers_for(env_id, env.observation_space):
        env = wrapper(env)
    return env


class Single:
    """One gymnasium env."""

    def __init__(self, env_id, kwargs):
        env = make_one(env_id, kwargs)
        self.env = env
        self.obs_space = describe(env.observation_space, "observation")
        self.act_space = describe(env.action_space, "action")
        self.act_dtype = getattr(env.action_space, "dtype", np.float32)
        self.start = self.act_space[2] if self.act_space[0] == "discrete" else 0
        self.lives = None

    def reset(self, seed):
        obs, info = self.env.reset(seed=seed)
        self.lives = info.get("lives")
        return flat(obs)

    def action_meanings(self):
        get = getattr(self.env.unwrapped, "get_action_meanings", None)
        return list(get()) if get else []

    def step_discrete(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action + self.start)
        self.lives = info.get("lives")
        # Rust reads Python and numpy scalars alike.
        return flat(obs), reward, terminated, truncated

    def step_continuous(self, action):
        obs, reward, terminated, truncated, info = self.env.step(
            np.asarray(action, dtype=self.act_dtype)
        )
        self.lives = info.get("lives")
        return flat(obs), float(reward), bool(terminated), bool(truncated)

    def close(self):
        self.env.close()


def use_venv_python_for_workers():
    """Makes multiprocessing start workers as fresh interpreters of this venv's python.

    The host runs inside a Rust process with threads of its own, which fork would copy in
    whatever state they are in; and `sys.executable` names that Rust binary, not python.
    """
    import multiprocessing
    import os
    import sys

    python = os.path.join(sys.prefix, "bin", "python")
    if not os.path.exists(python):
        python = os.path.join(sys.prefix, "bin", "python3")
    multiprocessing.set_executable(python)


def vector(env_id, num_envs, kwargs, mode):
    """`num_envs` envs stepped as one batch with same-step auto-reset: in this process
    (`mode` "sync"), or in a worker process each ("async")."""
    if mode == "async":
        return Vector(env_id, num_envs, kwargs)
    return Looped(env_id, num_envs, kwargs)


class Looped:
    """`num_envs` gymnasium envs stepped in one loop here, with same-step auto-reset: what a
    SyncVectorEnv does for fleetrl, without the work fleetrl never reads (merging every
    env's info into the vector's, copying the batch out again). Results are written into
    arrays made once, which the Rust side copies out before the next call."""

    def __init__(self, env_id, num_envs, kwargs):
        self.envs = [make_one(env_id, kwargs) for _ in range(num_envs)]
        first = self.envs[0]
        self.n = num_envs
        self.obs_space = describe(first.observation_space, "observation")
        self.act_space = describe(first.action_space, "action")
        self.act_dtype = getattr(first.action_space, "dtype", np.float32)
        self.start = self.act_space[2] if self.act_space[0] == "discrete" else 0
        shape = tuple(self.obs_space[1]) if self.obs_space[0] == "box" else (1,)
        self.obs = np.zeros((num_envs,) + shape, dtype=np.float32)
        self.final = np.zeros((num_envs,) + shape, dtype=np.float32)
        self.reward = np.zeros(num_envs, dtype=np.float64)
        self.terminated = np.zeros(num_envs, dtype=np.uint8)
        self.truncated = np.zeros(num_envs, dtype=np.uint8)

    def reset(self, seed):
        for i, env in enumerate(self.envs):
            self.obs[i], _ = env.reset(seed=seed + i)
        return self.obs

    def step(self, actions):
        """actions: bytes of int64 (discrete) or float32 (box) values, row-major."""
        if self.act_space[0] == "discrete":
            a = (np.frombuffer(actions, dtype=np.int64) + self.start).tolist()
        else:
            a = np.frombuffer(actions, dtype=np.float32).reshape(self.n, -1)
            a = a.astype(self.act_dtype, copy=False)
        obs, reward, terminated, truncated, final = (
            self.obs,
            self.reward,
            self.terminated,
            self.truncated,
            None,
        )
        for i, env in enumerate(self.envs):
            o, r, term, trunc, _ = env.step(a[i])
            reward[i], terminated[i], truncated[i] = r, term, trunc
            try:
                if term or trunc:
                    self.final[i] = o
                    final = self.final
                    o, _ = env.reset()
                obs[i] = o
            except ValueError as e:
                if np.shape(o) == obs.shape[1:]:
                    raise  # not the observation's shape: e.g. the env's own reset failed
                raise ValueError(
                    f"the env returned an observation of shape {np.shape(o)} where its "
                    f"observation space has shape {obs.shape[1:]} ({e})"
                ) from e
        return (obs, reward, terminated, truncated, final)

    def close(self):
        for env in self.envs:
            env.close()


class Vector:
    """A gymnasium AsyncVectorEnv with same-step auto-reset and one worker process per env,
    stepped as one batch."""

    def __init__(self, env_id, num_envs, kwargs):
        import_namespace(env_id)
        from gymnasium.vector import AutoresetMode

        probe = gym.make(env_id, **kwargs)
        wrappers = wrappers_for(env_id, probe.observation_space) or None
        probe.close()
        use_venv_python_for_workers()
        self.env = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="async",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP, "context": "spawn"},
            wrappers=wrappers,
            **kwargs,
        )
        self.n = num_envs
        self.obs_space = describe(self.env.single_observation_space, "observation")
        self.act_space = describe(self.env.single_action_space, "action")
        self.act_dtype = getattr(self.env.single_action_space, "dtype", np.float32)
        self.start = self.act_space[2] if self.act_space[0] == "discrete" else 0
        self.dim = int(np.prod(self.obs_space[1])) if self.obs_space[0] == "box" else 1

    def reset(self, seed):
        obs, _ = self.env.reset(seed=[seed + i for i in range(self.n)])
        return flat(obs)

    def step(self, actions):
        """actions: bytes of int64 (discrete) or float32 (box) values, row-major."""
        if self.act_space[0] == "discrete":
            a = np.frombuffer(actions, dtype=np.int64)
            if self.start:
                a = a + self.start
        else:
            a = np.frombuffer(actions, dtype=np.float32).reshape(self.n, -1)
            a = a.astype(self.act_dtype, copy=False)
        obs, reward, terminated, truncated, info = self.env.step(a)
        final = None
        if "_final_obs" in info:
            mask = info["_final_obs"]
            if mask.any():
                final = np.zeros((self.n, self.dim), dtype=np.float32)
                for i in np.flatnonzero(mask):
                    final[i] = flat(info["final_obs"][i]).ravel()
        # float64 rewards and bool flags are read as they are (a uint8 view copies nothing).
        if reward.dtype != np.float64:
            reward = reward.astype(np.float64)
        return (flat(obs), reward, terminated.view(np.uint8), truncated.view(np.uint8), final)

    def close(self):
        self.env.close()


# EnvPool (`envpool:` ids): its C++ thread pool steps the envs; these classes give it the
# interfaces of `Single` and `Vector` above, so the same Rust types host it.

ENVPOOL_SEED_RANGE = 2**31 - 2**20  # EnvPool seeds are int32; env i gets seed + i.


def make_envpool(env_id, num_envs, seed, kwargs):
    try:
        import envpool
    except ImportError as e:
        raise ImportError(
            f"`envpool:{env_id}` needs the envpool package: run `.venv/bin/pip install "
            f"envpool==1.2.5`, or scripts/setup.sh ({e})"
        ) from e
    for key in ("num_envs", "batch_size", "seed"):
        if key in kwargs:
            raise ValueError(
                f"[env] kwargs.{key} is fleetrl's to set for envpool ids (num_envs is "
                "actors.envs_per_actor, seeds come from the run's seed, and the pool is "
                "stepped whole); remove it"
            )
    if env_id not in envpool.list_all_envs():
        raise ValueError(f"`{env_id}` is not an EnvPool task id (envpool.list_all_envs())")
    import warnings

    with warnings.catch_warnings():
        # EnvPool's float64 box bounds, cast to float32 by gymnasium, warn on every pool.
        warnings.filterwarnings("ignore", message=".*precision lowered.*")
        env = envpool.make_gymnasium(
            env_id, num_envs=num_envs, seed=int(seed) % ENVPOOL_SEED_RANGE, **kwargs
        )
        env.single_observation_space, env.single_action_space  # made (and cached) here
    return env


class EnvPoolVector:
    """An EnvPool of `num_envs` stepped whole, with same-step auto-reset: EnvPool resets a
    finished env on the step after it ends, so a step that ends episodes resets those envs at
    once (`reset(env_id=...)`) and hands their last observations back as `final`."""

    def __init__(self, env_id, num_envs, kwargs):
        self.env_id, self.n, self.kwargs = env_id, num_envs, dict(kwargs)
        self.seed = 0
        self.env = make_envpool(env_id, num_envs, self.seed, self.kwargs)
        # Until the first step, a reset with the seed it was made with needs no new pool.
        self.fresh = True
        self.obs_space = describe(self.env.single_observation_space, "observation")
        self.act_space = describe(self.env.single_action_space, "action")
        self.act_dtype = getattr(self.env.single_action_space, "dtype", np.float32)
        self.dim = int(np.prod(self.obs_space[1])) if self.obs_space[0] == "box" else 1

    def reset(self, seed):
        # EnvPool seeds its envs when the pool is made: same seed, same starts takes a new pool.
        if seed is not None and not (self.fresh and seed == self.seed):
            self.env.close()
            self.seed = seed
            self.env = make_envpool(self.env_id, self.n, seed, self.kwargs)
        self.fresh = False
        obs, _ = self.env.reset()
        return flat(obs)

    def actions(self, actions):
        if self.act_space[0] == "discrete":
            return np.frombuffer(actions, dtype=np.int64).astype(self.act_dtype, copy=False)
        a = np.frombuffer(actions, dtype=np.float32).reshape(self.n, -1)
        return a.astype(self.act_dtype, copy=False)

    def step(self, actions):
        """actions: bytes of int64 (discrete) or float32 (box) values, row-major."""
        self.fresh = False
        obs, reward, terminated, truncated, _ = self.env.step(self.actions(actions))
        obs = flat(obs)
        ended = np.flatnonzero(terminated | truncated)
        final = None
        if ended.size:
            final = np.zeros((self.n, self.dim), dtype=np.float32)
            final[ended] = obs[ended].reshape(ended.size, -1)
            starts, info = self.env.reset(env_id=ended.astype(np.int32))
            obs = np.array(obs, copy=True)
            obs[np.asarray(info["env_id"])] = flat(starts)
        return (
            obs,
            np.asarray(reward, dtype=np.float64),
            np.asarray(terminated, dtype=np.bool_).view(np.uint8),
            np.asarray(truncated, dtype=np.bool_).view(np.uint8),
            final,
        )

    def close(self):
        self.env.close()


class EnvPoolSingle:
    """One EnvPool env behind `Single`'s interface (for Rust wrappers and evaluation)."""

    def __init__(self, env_id, kwargs):
        self.pool = EnvPoolVector(env_id, 1, kwargs)
        self.obs_space, self.act_space = self.pool.obs_space, self.pool.act_space
        self.lives = None

    def reset(self, seed):
        return self.pool.reset(seed)[0]

    def action_meanings(self):
        return []

    def step_discrete(self, action):
        return self.step_one(np.array([action], dtype=self.pool.act_dtype))

    def step_continuous(self, action):
        return self.step_one(np.asarray([action], dtype=self.pool.act_dtype))

    def step_one(self, action):
        # No auto-reset here: after an episode ends the Rust side calls reset.
        self.pool.fresh = False
        obs, reward, terminated, truncated, _ = self.pool.env.step(action)
        return flat(obs)[0], float(reward[0]), bool(terminated[0]), bool(truncated[0])

    def close(self):
        self.pool.close()


# Meta-World ML1 (`MetaWorld/<name>` ids, e.g. `MetaWorld/reach-v3`): one Meta-World env whose
# task (the goal and object positions, Meta-World's `rand_vec`) fleetrl sets by seed.
#
# metaworld 3.1.1 pins mujoco 3.3.0 and fails on the 4.0 that gymnasium's MuJoCo envs use
# here, so scripts/setup.sh installs it with its own mujoco into a directory of its own
# (`.venv/metaworld`), which goes first on sys.path in the processes that make these envs.


def use_metaworld(path):
    """Imports metaworld from `path` (setup.sh's directory), with the mujoco it pins."""
    import importlib.util
    import os
    import sys

    path = os.path.abspath(path)
    if path not in sys.path:
        sys.path.insert(0, path)
    loaded = sys.modules.get("mujoco")
    if loaded is not None and not getattr(loaded, "__file__", "").startswith(path):
        raise ImportError(
            f"this process already loaded mujoco {loaded.__version__}, which metaworld does not "
            "run on: Meta-World envs cannot share a process with other MuJoCo envs"
        )
    if importlib.util.find_spec("metaworld") is None:
        raise ImportError(
            f"MetaWorld/ ids need the metaworld package in {path}: run scripts/setup.sh, or "
            f"`pip install --no-deps --only-binary=:all: --target {path} "
            "-r scripts/metaworld-requirements.txt` from a fleetrl checkout"
        )
    import metaworld

    return metaworld


class MetaWorldSingle(Single):
    """One Meta-World ML1 env. Tasks are drawn as ML1 draws them (a `rand_vec` uniform in the
    env's random reset space, the goal hidden from the observation), from a generator seeded
    by fleetrl's task draw, so each task id has its own goal in every process."""

    def __init__(self, env_name, kwargs):
        metaworld = use_metaworld(kwargs.pop("metaworld_path"))
        from metaworld import env_dict

        classes = env_dict.ALL_V3_ENVIRONMENTS
        if env_name not in classes:
            raise ValueError(
                f"`MetaWorld/{env_name}` is not a Meta-World v3 env; known: "
                + ", ".join(sorted(classes))
            )
        max_steps = kwargs.pop("max_episode_steps", None)
        if kwargs:
            raise ValueError(f"MetaWorld/ envs take no [env] kwargs, got {sorted(kwargs)}")
        self.metaworld = metaworld
        self.name = env_name
        self.cls = classes[env_name]
        self.task_kwargs = dict(env_dict.ML1_ARGS_KWARGS[env_name]["kwargs"])
        self.task_kwargs.pop("task_id", None)
        env = self.cls()
        if max_steps:
            env.max_path_length = int(max_steps)
        self.env = env
        self.set_task(0)
        self.obs_space = describe(env.observation_space, "observation")
        self.act_space = describe(env.action_space, "action")
        self.act_dtype = env.action_space.dtype
        self.start = 0
        self.lives = None
        self.success = False

    def task_of(self, draw):
        """ML1's task for fleetrl's task draw `draw`: a `rand_vec` drawn as ML1 draws its tasks'
        (by resets with the vector unfrozen, which redraw until goal and object are apart),
        from a generator seeded by `draw`."""
        import pickle

        env = self.env
        env._freeze_rand_vec = False
        env._set_task_called = True
        env.seeded_rand_vec = True
        try:
            env.seed(int(draw) % 2**32)  # Meta-World's reset ignores its seed argument
            env.reset()
            rand_vec = np.array(env._last_rand_vec, copy=True)
        finally:
            env.seeded_rand_vec = False
        data = dict(self.task_kwargs)
        data.update(rand_vec=rand_vec, env_cls=self.cls, partially_observable=True)
        return self.metaworld.Task(env_name=self.name, data=pickle.dumps(data))

    def set_task(self, draw):
        self.env.set_task(self.task_of(draw))

    def step_continuous(self, action):
        obs, reward, terminated, truncated, info = self.env.step(
            np.asarray(action, dtype=self.act_dtype)
        )
        self.success = bool(info.get("success", 0.0))
        return flat(obs), float(reward), bool(terminated), bool(truncated)

    def reset(self, seed):
        if seed is not None:
            self.env.seed(int(seed) % 2**32)  # Meta-World's reset ignores its seed argument
        self.success = False
        return Single.reset(self, None)

    def goal(self):
        return [float(x) for x in self.env._target_pos]

    def task_vector(self):
        return [float(x) for x in self.env._last_rand_vec]
