"""Off-policy networks fleetrl's [model] section cannot express, as TorchScript modules it trains.

Residual blocks with layer norm (examples/residual_policy.py's `Residual`) under each network:
DQN's Q-network, SAC's actor and its critic. The interfaces `model.torchscript` and
`model.torchscript_critic` expect (docs/torchscript.md):

    q       forward(obs [N, D]) -> q [N, n]                    DQN (model.torchscript)
    actor   forward(obs [N, D]) -> (mean [N, A], log_std [N, A])  SAC (model.torchscript)
    critic  forward(obs [N, D], action [N, A]) -> q [N, 1]     SAC (model.torchscript_critic)

fleetrl squashes the actor's Gaussian with tanh and scales it to the action box, and hands the
critic actions scaled to [-1, 1]; each of SAC's twin critics is a copy with its own parameters.

    .venv/bin/python examples/residual_offpolicy.py q --obs-dim 4 --actions 2 --out q.pt
    fleetrl train --config cartpole-dqn --set model.torchscript=q.pt

    .venv/bin/python examples/residual_offpolicy.py actor --obs-dim 3 --actions 1 --out actor.pt
    .venv/bin/python examples/residual_offpolicy.py critic --obs-dim 3 --actions 1 --out critic.pt
    fleetrl train --config pendulum-sac --set model.torchscript=actor.pt \\
        --set model.torchscript_critic=critic.pt
"""

import argparse

import torch
from torch import nn

from residual_policy import Residual


class Trunk(nn.Module):
    """Linear embedding, residual blocks, a final layer norm and ReLU."""

    def __init__(self, inputs: int, width: int, blocks: int):
        super().__init__()
        self.embed = nn.Linear(inputs, width)
        self.blocks = nn.Sequential(*[Residual(width) for _ in range(blocks)])
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.blocks(self.embed(x))))


class QNetwork(nn.Module):
    """DQN: one Q value per discrete action."""

    def __init__(self, obs_dim: int, actions: int, width: int = 64, blocks: int = 1):
        super().__init__()
        self.trunk = Trunk(obs_dim, width, blocks)
        self.q = nn.Linear(width, actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(self.trunk(obs))


class Actor(nn.Module):
    """SAC: the Gaussian's mean and log-std before fleetrl's tanh squash."""

    def __init__(self, obs_dim: int, actions: int, width: int = 64, blocks: int = 1):
        super().__init__()
        self.trunk = Trunk(obs_dim, width, blocks)
        self.mean = nn.Linear(width, actions)
        self.log_std = nn.Linear(width, actions)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.trunk(obs)
        return self.mean(x), self.log_std(x)


class Critic(nn.Module):
    """SAC: Q(s, a) for an action in [-1, 1]."""

    def __init__(self, obs_dim: int, actions: int, width: int = 64, blocks: int = 1):
        super().__init__()
        self.trunk = Trunk(obs_dim + actions, width, blocks)
        self.q = nn.Linear(width, 1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.q(self.trunk(torch.cat([obs, action], dim=1)))


NETWORKS = {"q": QNetwork, "actor": Actor, "critic": Critic}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("network", choices=sorted(NETWORKS), help="which network to write")
    parser.add_argument("--obs-dim", type=int, required=True, help="observation width D")
    parser.add_argument("--actions", type=int, required=True, help="n actions, or A dims")
    parser.add_argument("--width", type=int, default=64, help="units of each layer")
    parser.add_argument("--blocks", type=int, default=1, help="residual blocks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="the .pt file to write")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    network = NETWORKS[args.network](args.obs_dim, args.actions, args.width, args.blocks)
    torch.jit.save(torch.jit.script(network), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
