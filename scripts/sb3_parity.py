"""The Stable-Baselines3 side of fleetrl's parity tests (core/tests/sb3_parity.rs).

`sb3_parity.py ALGO DIR` reads what the Rust test wrote to DIR:

- `init.safetensors`: fleetrl's initial parameters by var-store path (`pi.l0.weight`, ...),
  and its target networks' as `target.NAME`,
- `batch.safetensors`: the batch fleetrl updated on,
- `config.json`: fleetrl's `[algo]` and `[model]` sections,

loads the parameters into SB3's policy by name, runs SB3's own update on the same batch and
writes `out.safetensors`: the parameters after the update under fleetrl's names, and what
SB3 computed on the way (`before.*` from the loaded weights, `loss.*` of the last gradient
step). The Rust side compares. Needs `stable-baselines3` in `.venv` (scripts/setup.sh).
"""

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch as th
from torch import nn

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}


def load(path):
    """A safetensors file as a dict of tensors (the format is a JSON header and raw bytes)."""
    data = Path(path).read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = th.from_numpy(array.copy())
    return out


def save(path, tensors):
    """Writes float32 tensors as a safetensors file."""
    header, blobs, offset = {}, [], 0
    for name, tensor in tensors.items():
        blob = tensor.detach().cpu().to(th.float32).contiguous().numpy().tobytes()
        shape = list(tensor.shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def activation(name):
    return {"tanh": nn.Tanh, "relu": nn.ReLU}[name]


def mlp_names(fleetrl, sb3, layers):
    """fleetrl's `PREFIX.l0..., PREFIX.out` against SB3's sequential indices: Linear layers at
    0, 2, 4, ... (an activation between each)."""
    pairs = []
    for i, name in enumerate([f"l{k}" for k in range(layers - 1)] + ["out"]):
        for p in ("weight", "bias"):
            pairs.append((f"{fleetrl}.{name}.{p}", f"{sb3}.{2 * i}.{p}"))
    return pairs


def target_init(init):
    """The target networks' initial weights (`target.NAME`; fleetrl's differ from the online
    ones in the tests, so a loss that read the wrong network would show)."""
    return {name[len("target.") :]: t for name, t in init.items() if name.startswith("target.")}


def load_into(module, init, pairs):
    state = module.state_dict()
    assert len(pairs) == len(state), (sorted(state), pairs)
    with th.no_grad():
        for ours, theirs in pairs:
            assert state[theirs].shape == init[ours].shape, (ours, theirs)
            state[theirs].copy_(init[ours])


def spy(module, name, calls):
    """Wraps `module.name` so each call's result is appended to `calls` (SB3 logs only means
    over an update's gradient steps; the tests compare each step)."""
    inner = getattr(module, name)

    def wrapped(*args, **kwargs):
        result = inner(*args, **kwargs)
        calls.append(result.detach().clone())
        return result

    setattr(module, name, wrapped)


def ppo(directory, init, batch, config):
    """One PPO update (`PPO.train`) on the rollout fleetrl trained on."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import DummyVecEnv

    algo, model = config["algo"], config["model"]
    t, b = batch["reward"].shape
    hidden = model["hidden_sizes"]
    envs = DummyVecEnv([lambda: gym.make("CartPole-v1")] * b)
    agent = PPO(
        "MlpPolicy",
        envs,
        n_steps=t,
        batch_size=t * b // algo["minibatches"],
        n_epochs=algo["epochs"],
        learning_rate=config["learning_rate"],
        clip_range=config["clip_range"],
        gamma=algo["discount"],
        gae_lambda=algo["gae_lambda"],
        ent_coef=algo["entropy_loss_coeff"],
        vf_coef=algo["value_loss_coeff"],
        max_grad_norm=algo["clip_grad_norm"],
        normalize_advantage=algo["normalize_advantage"],
        policy_kwargs=dict(
            net_arch=dict(pi=hidden, vf=hidden),
            activation_fn=activation(model["activation"]),
            ortho_init=False,
            optimizer_kwargs=dict(eps=algo["adam_eps"]),
        ),
        device="cpu",
    )
    agent.set_logger(configure(None, []))
    policy = agent.policy
    layers = len(hidden) + 1
    pairs = [
        (f"pi.l{i}.{p}", f"mlp_extractor.policy_net.{2 * i}.{p}")
        for i in range(len(hidden))
        for p in ("weight", "bias")
    ]
    pairs += [
        (f"vf.l{i}.{p}", f"mlp_extractor.value_net.{2 * i}.{p}")
        for i in range(len(hidden))
        for p in ("weight", "bias")
    ]
    pairs += [(f"pi.out.{p}", f"action_net.{p}") for p in ("weight", "bias")]
    pairs += [(f"vf.out.{p}", f"value_net.{p}") for p in ("weight", "bias")]
    assert len(pairs) == 4 * layers
    load_into(policy, init, pairs)

    obs, action = batch["obs"], batch["action"]
    done = (batch["terminated"] + batch["truncated"]).clamp(max=1).numpy()
    buffer = agent.rollout_buffer
    buffer.reset()
    for step in range(t):
        start = done[step - 1] if step > 0 else np.zeros(b, dtype=np.float32)
        buffer.add(
            obs[step].numpy(),
            action[step].numpy().reshape(b, 1),
            batch["reward"][step].numpy(),
            start,
            batch["value"][step],
            batch["log_prob"][step],
        )
    buffer.compute_returns_and_advantage(batch["bootstrap_value"], batch["terminated"][-1].numpy())
    # Time-major like fleetrl's; `train` flattens the buffer env-major.
    advantage = th.from_numpy(buffer.advantages.reshape(-1).copy())
    with th.no_grad():
        flat = obs.reshape(t * b, -1)
        value, log_prob, _ = policy.evaluate_actions(flat, action.reshape(-1))

    # fleetrl with `shuffle = false` takes its minibatches in time-major order (row t * B + b);
    # SB3 draws a permutation of its env-major rows (b * T + t): hand it the one that matches.
    order = np.array([(r % b) * t + r // b for r in range(t * b)])
    np.random.permutation = lambda n: order.copy()
    norms, value_losses = [], []
    spy(th.nn.utils, "clip_grad_norm_", norms)
    spy(th.nn.functional, "mse_loss", value_losses)
    agent.train()
    logged = agent.logger.name_to_value
    out = {f"after.{ours}": policy.state_dict()[theirs] for ours, theirs in pairs}
    out["before.value"] = value.flatten()
    out["before.log_prob"] = log_prob
    out["before.advantage"] = advantage
    out["loss.total"] = th.tensor(logged["train/loss"])
    out["loss.value"] = value_losses[-1]
    out["loss.grad_norm"] = norms[-1]
    return out


def dqn(directory, init, batch, config):
    """`DQN.train` with `gradient_steps = updates`, every step on the batch fleetrl trained on
    (SB3's replay sampling replaced by that batch)."""
    from stable_baselines3 import DQN
    from stable_baselines3.common.logger import configure
    algo, model = config["algo"], config["model"]
    hidden = model["hidden_sizes"]
    agent = DQN(
        "MlpPolicy",
        gym.make("CartPole-v1"),
        learning_rate=algo["learning_rate"],
        buffer_size=1000,
        batch_size=batch["reward"].shape[0],
        gamma=algo["discount"],
        max_grad_norm=algo["clip_grad_norm"],
        policy_kwargs=dict(
            net_arch=hidden,
            activation_fn=activation(model["activation"]),
            optimizer_kwargs=dict(eps=algo["optimizer_eps"]),
        ),
        device="cpu",
    )
    agent.set_logger(configure(None, []))
    pairs = mlp_names("q.common", "q_net", len(hidden) + 1)
    load_into(agent.q_net, init, pairs)
    load_into(agent.q_net_target, target_init(init), pairs)
    samples = transitions(batch)
    agent.replay_buffer.sample = lambda *args, **kwargs: samples
    norms, losses = [], []
    spy(th.nn.utils, "clip_grad_norm_", norms)
    spy(th.nn.functional, "smooth_l1_loss", losses)
    agent.train(gradient_steps=config["updates"], batch_size=batch["reward"].shape[0])
    q, target = agent.q_net.state_dict(), agent.q_net_target.state_dict()
    out = {f"after.{ours}": q[theirs] for ours, theirs in pairs}
    out.update({f"target.{ours}": target[theirs] for ours, theirs in pairs})
    out["loss.q"] = th.stack(losses)
    out["loss.grad_norm"] = th.stack(norms)
    return out


def transitions(batch):
    """fleetrl's transition batch as SB3's replay samples: the n-step discounts as its
    `discounts`, `dones` where the discount is 0."""
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    discount = batch["discount"].reshape(-1, 1)
    action = batch["action"]
    return ReplayBufferSamples(
        observations=batch["obs"],
        actions=action.reshape(-1, 1) if action.dim() == 1 else action,
        next_observations=batch["next_obs"],
        dones=(discount == 0).to(th.float32),
        rewards=batch["reward"].reshape(-1, 1),
        discounts=discount,
    )


def critic_names(model, critics):
    layers = len(model["hidden_sizes"]) + 1
    return [pair for k in range(critics) for pair in mlp_names(f"qf{k}.common", f"qf{k}", layers)]


def actor_critic(agent_class, batch, config, **kwargs):
    """An SB3 off-policy agent on MountainCarContinuous (actions in [-1, 1], so SB3's rescaled
    actions are fleetrl's), its replay sampling replaced by fleetrl's batch."""
    from stable_baselines3.common.logger import configure

    algo, model = config["algo"], config["model"]
    agent = agent_class(
        "MlpPolicy",
        gym.make("MountainCarContinuous-v0"),
        buffer_size=1000,
        batch_size=batch["reward"].shape[0],
        gamma=algo["discount"],
        tau=algo["target"]["tau"],
        policy_kwargs=dict(
            net_arch=model["hidden_sizes"],
            activation_fn=activation(model["activation"]),
            n_critics=algo["num_critics"],
        ),
        device="cpu",
        **kwargs,
    )
    agent.set_logger(configure(None, []))
    samples = transitions(batch)
    agent.replay_buffer.sample = lambda *args, **kwargs: samples
    return agent


def td3(directory, init, batch, config):
    """`TD3.train` with `gradient_steps = updates` on fleetrl's batch, without target policy
    smoothing (its noise is random on each side)."""
    from stable_baselines3 import TD3

    algo, model = config["algo"], config["model"]
    assert algo["policy_lr"] == algo["qf_lr"], "SB3 has one learning rate"
    agent = actor_critic(
        TD3,
        batch,
        config,
        learning_rate=algo["policy_lr"],
        policy_delay=algo["policy_delay"],
        target_policy_noise=0.0,
    )
    actor = mlp_names("pi.common", "mu", len(model["hidden_sizes"]) + 1)
    critic = critic_names(model, algo["num_critics"])
    load_into(agent.actor, init, actor)
    load_into(agent.actor_target, target_init(init), actor)
    load_into(agent.critic, init, critic)
    load_into(agent.critic_target, target_init(init), critic)
    critic_losses, actor_losses = [], []
    spy(th.nn.functional, "mse_loss", critic_losses)
    agent.train(gradient_steps=config["updates"], batch_size=batch["reward"].shape[0])
    out = {}
    for prefix, module, pairs in [
        ("after", agent.actor, actor),
        ("after", agent.critic, critic),
        ("target", agent.actor_target, actor),
        ("target", agent.critic_target, critic),
    ]:
        state = module.state_dict()
        out.update({f"{prefix}.{ours}": state[theirs] for ours, theirs in pairs})
    # The critics' mean squared errors, summed per gradient step (SB3's critic loss).
    per_step = th.stack(critic_losses).reshape(config["updates"], algo["num_critics"])
    out["loss.q"] = per_step.sum(1)
    out["loss.policy"] = th.tensor(agent.logger.name_to_value["train/actor_loss"])
    return out


def sac(directory, init, batch, config):
    """`SAC.train` with `gradient_steps = updates` on fleetrl's batch; the Gaussian noise of
    each reparameterised sample is fleetrl's (`noise.K`, in SB3's order of sampling)."""
    from stable_baselines3 import SAC

    algo, model = config["algo"], config["model"]
    assert algo["policy_lr"] == algo["qf_lr"], "SB3 has one learning rate"
    alpha = algo["initial_alpha"]
    agent = actor_critic(
        SAC,
        batch,
        config,
        learning_rate=algo["policy_lr"],
        ent_coef=f"auto_{alpha}" if algo["auto_alpha"] else alpha,
        target_entropy=algo["target_entropy"] if algo["target_entropy"] is not None else "auto",
        target_update_interval=algo["target"]["period"],
    )
    hidden = model["hidden_sizes"]
    latent = [
        (f"pi.common.l{i}.{p}", f"latent_pi.{2 * i}.{p}")
        for i in range(len(hidden))
        for p in ("weight", "bias")
    ]
    # fleetrl's policy has one output layer, the mean's rows first, then the log-std's.
    a = agent.actor.mu.out_features
    split = dict(init)
    for p in ("weight", "bias"):
        whole = init[f"pi.common.out.{p}"]
        split[f"pi.mu.{p}"], split[f"pi.log_std.{p}"] = whole[:a], whole[a:]
    heads = [(f"pi.{h}.{p}", f"{h}.{p}") for h in ("mu", "log_std") for p in ("weight", "bias")]
    load_into(agent.actor, split, latent + heads)
    critic = critic_names(model, algo["num_critics"])
    load_into(agent.critic, init, critic)
    load_into(agent.critic_target, target_init(init), critic)
    noise = [batch[f"noise.{k}"] for k in range(2 * config["updates"])]
    th.distributions.Normal.rsample = lambda self, shape=(): self.loc + self.scale * noise.pop(0)
    critic_losses = []
    spy(th.nn.functional, "mse_loss", critic_losses)
    agent.train(gradient_steps=config["updates"], batch_size=batch["reward"].shape[0])
    assert not noise, "every noise sample used"
    actor = agent.actor.state_dict()
    out = {f"after.{ours}": actor[theirs] for ours, theirs in latent}
    for p in ("weight", "bias"):
        out[f"after.pi.common.out.{p}"] = th.cat([actor[f"mu.{p}"], actor[f"log_std.{p}"]])
    for prefix, module in [("after", agent.critic), ("target", agent.critic_target)]:
        state = module.state_dict()
        out.update({f"{prefix}.{ours}": state[theirs] for ours, theirs in critic})
    per_step = th.stack(critic_losses).reshape(config["updates"], algo["num_critics"])
    out["loss.q"] = 0.5 * per_step.sum(1)
    out["after.log_alpha"] = agent.log_ent_coef.detach().reshape([])
    logged = agent.logger.name_to_value
    out["loss.policy"] = th.tensor(logged["train/actor_loss"])
    return out


def main():
    algo, directory = sys.argv[1], Path(sys.argv[2])
    try:
        import stable_baselines3

        assert stable_baselines3.__version__ == "2.9.2", stable_baselines3.__version__
    except ImportError:
        sys.exit(f"stable-baselines3 is not installed in {sys.prefix}: run scripts/setup.sh")
    th.set_num_threads(1)
    init = load(directory / "init.safetensors")
    batch = load(directory / "batch.safetensors")
    config = json.loads((directory / "config.json").read_text())
    out = {"ppo": ppo, "dqn": dqn, "td3": td3, "sac": sac}[algo](directory, init, batch, config)
    save(directory / "out.safetensors", out)


if __name__ == "__main__":
    main()
