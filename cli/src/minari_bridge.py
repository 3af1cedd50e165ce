"""fleetrl's one bridge to Minari: datasets in as demo files, demo files out as a dataset.

    to-demos DATASET OUT_DIR ENV_ID
        Writes each episode of the Minari dataset DATASET (an id under MINARI_DATASETS_PATH or
        ~/.minari/datasets, or the path of a dataset directory) as OUT_DIR/episode-NNNNNNNN
        .demo.safetensors (fleetrl-demo version 1, source "human": data fleetrl did not play),
        labelled ENV_ID. Prints one JSON line: the dataset's id, env id, episode and step
        counts, and its observation and action shapes.
    from-demos DEMO_DIR DATASET_ID ENV_ID
        Writes the demo files in DEMO_DIR (sorted by name) as the Minari dataset DATASET_ID
        under MINARI_DATASETS_PATH (or ~/.minari/datasets), with ENV_ID's gymnasium spec when
        gymnasium knows the id. Prints one JSON line like to-demos.

Errors go to stderr as one line naming the dataset or file and exit with status 2. The demo
files are safetensors, written and read here with numpy alone (the format is a little-endian
u64 header length, a JSON header, then the raw arrays), so no safetensors package is needed.
"""

import json
import os
import struct
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")
DEMO_EXTENSION = ".demo.safetensors"
DTYPES = {"F32": np.float32, "I64": np.int64, "U8": np.uint8}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


class Refused(Exception):
    """A problem with the input that the user must fix; its message names the input."""


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        blob = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {
            "dtype": NAMES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        (length,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + length])
    except (struct.error, ValueError) as e:
        raise Refused(f"{path} is not a safetensors file: {e}")
    metadata = header.pop("__metadata__", {}) or {}
    data = raw[8 + length :]
    tensors = {}
    for name, info in header.items():
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=np.dtype(DTYPES[info["dtype"]]).newbyteorder("<"))
        tensors[name] = array.reshape(info["shape"])
    return tensors, metadata


def open_dataset(name):
    import minari

    if os.path.isdir(name):
        data = os.path.join(name, "data")
        return minari.MinariDataset(data if os.path.isdir(data) else name)
    try:
        return minari.load_dataset(name)
    except FileNotFoundError:
        local = sorted(minari.list_local_datasets())
        raise Refused(
            f"Minari dataset {name!r} not found (looked under MINARI_DATASETS_PATH="
            f"{os.environ.get('MINARI_DATASETS_PATH', '~/.minari/datasets')}; local datasets: "
            f"{', '.join(local) or 'none'})"
        ) from None


def space_summary(space):
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        return {"discrete": int(space.n)}
    if isinstance(space, gym.spaces.Box):
        return {"box": list(space.shape)}
    return {"unsupported": str(space)}


def to_demos(name, out_dir, env_id):
    import gymnasium as gym

    try:
        dataset = open_dataset(name)
    except Refused:
        raise
    except Exception as e:  # a corrupt HDF5 file or metadata.json
        raise Refused(f"Minari dataset {name!r} could not be read: {type(e).__name__}: {e}")
    obs_space, act_space = dataset.observation_space, dataset.action_space
    if not isinstance(obs_space, gym.spaces.Box):
        raise Refused(f"Minari dataset {name!r}: observation space {obs_space} is not a Box (fleetrl demos hold one array per step)")
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) != 1:
        raise Refused(f"Minari dataset {name!r}: action space {act_space} is not a one-dimensional Box")
    if not isinstance(act_space, (gym.spaces.Box, gym.spaces.Discrete)):
        raise Refused(f"Minari dataset {name!r}: action space {act_space} is neither Discrete nor Box")
    os.makedirs(out_dir, exist_ok=True)
    steps = 0
    episodes = 0
    try:
        for episode in dataset.iterate_episodes():
            steps += write_episode(name, episode, out_dir, env_id, act_space)
            episodes += 1
    except Refused:
        raise
    except Exception as e:
        raise Refused(f"Minari dataset {name!r} could not be read: {type(e).__name__}: {e}")
    if episodes == 0:
        raise Refused(f"Minari dataset {name!r} holds no episodes")
    spec = dataset.spec.env_spec
    return {
        "dataset": dataset.spec.dataset_id,
        "env_id": spec.id if spec is not None else None,
        "episodes": episodes,
        "steps": steps,
        "observation": space_summary(obs_space),
        "action": space_summary(act_space),
    }


def write_episode(name, episode, out_dir, env_id, act_space):
    import gymnasium as gym

    t = len(episode.rewards)
    obs = np.asarray(episode.observations, dtype=np.float32)
    if obs.shape[0] != t + 1:
        raise Refused(f"Minari dataset {name!r}, episode {episode.id}: {obs.shape[0]} observations for {t} steps (want T+1)")
    terminated = bool(t > 0 and episode.terminations[-1])
    tensors = {
        "observations": obs,
        "rewards": np.asarray(episode.rewards, dtype=np.float32).reshape(t),
    }
    if isinstance(act_space, gym.spaces.Discrete):
        tensors["actions"] = np.asarray(episode.actions, dtype=np.int64).reshape(t) - int(act_space.start)
        space = f"discrete({int(act_space.n)})"
    else:
        dim = act_space.shape[0]
        tensors["actions"] = np.asarray(episode.actions, dtype=np.float32).reshape(t, dim)
        tensors["action_low"] = act_space.low.astype(np.float32)
        tensors["action_high"] = act_space.high.astype(np.float32)
        space = f"box({dim})"
    metadata = {
        "format": "fleetrl-demo",
        "version": "1",
        "env_id": env_id,
        "source": "human",
        "terminated": "true" if terminated else "false",
        "action_space": space,
        "length": str(t),
        "total_reward": str(float(np.sum(tensors["rewards"], dtype=np.float64))),
    }
    write_safetensors(os.path.join(out_dir, f"episode-{int(episode.id):08d}{DEMO_EXTENSION}"), tensors, metadata)
    return t


def gym_env_id(env_id):
    """fleetrl's `gym:pkg:Env-v0` / `gym:Env-v0` / native `Env-v0` as gymnasium's id."""
    if env_id.startswith("gym:"):
        rest = env_id[len("gym:") :]
        module, _, name = rest.rpartition(":")
        if module:
            __import__(module)
        return name
    return env_id


def from_demos(demo_dir, dataset_id, env_id):
    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    files = sorted(f for f in os.listdir(demo_dir) if f.endswith(DEMO_EXTENSION))
    if not files:
        raise Refused(f"no demo files ({DEMO_EXTENSION}) in {demo_dir}")
    buffers, obs_space, act_space = [], None, None
    for i, f in enumerate(files):
        tensors, meta = read_safetensors(os.path.join(demo_dir, f))
        obs = tensors["observations"].astype(np.float32)
        t = len(tensors["rewards"])
        terminated = meta.get("terminated") == "true"
        if meta["action_space"].startswith("discrete("):
            act_space = gym.spaces.Discrete(int(meta["action_space"][len("discrete(") : -1]))
            actions = tensors["actions"].astype(np.int64)
        else:
            act_space = gym.spaces.Box(tensors["action_low"], tensors["action_high"], dtype=np.float32)
            actions = tensors["actions"].astype(np.float32)
        obs_space = obs_space or gym.spaces.Box(-np.inf, np.inf, shape=obs.shape[1:], dtype=np.float32)
        buffers.append(
            EpisodeBuffer(
                id=i,
                observations=list(obs),
                actions=list(actions),
                rewards=list(tensors["rewards"].astype(np.float64)),
                terminations=[False] * (t - 1) + [terminated],
                truncations=[False] * (t - 1) + [not terminated],
            )
        )
    name = gym_env_id(env_id)
    try:
        spec = gym.spec(name)
        env = gym.make(name)
        obs_space = env.observation_space
        env.close()
    except Exception:
        spec = None  # a fleetrl-only env: the dataset carries its spaces instead of a spec
    dataset = minari.create_dataset_from_buffers(
        dataset_id=dataset_id,
        buffer=buffers,
        env=spec,
        observation_space=obs_space if spec is None else None,
        action_space=act_space if spec is None else None,
        algorithm_name="fleetrl record",
        description=f"Episodes of {env_id} recorded by `fleetrl record`.",
    )
    return {
        "dataset": dataset.spec.dataset_id,
        "env_id": spec.id if spec is not None else None,
        "episodes": dataset.total_episodes,
        "steps": dataset.total_steps,
        "path": os.path.dirname(dataset.spec.data_path),
    }


def main():
    command, args = sys.argv[1], sys.argv[2:]
    try:
        result = {"to-demos": to_demos, "from-demos": from_demos}[command](*args)
    except Refused as e:
        print(e, file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # minari's own refusals (a dataset id that exists, a bad id)
        print(f"{command} {' '.join(args)}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
