"""A network fleetrl's [model] section cannot express, as a TorchScript module fleetrl trains.

Residual blocks with layer norm over one trunk that feeds both a policy head and a value head.
`forward(obs) -> (policy, value)` is the interface `model.torchscript` expects (see
docs/torchscript.md): policy is the logits [N, n] of a discrete action or the mean [N, A] of a
continuous one, value is [N, 1].

    .venv/bin/python examples/residual_policy.py --obs-dim 4 --actions 2 --out policy.pt
    fleetrl train --config cartpole-ppo --set model.torchscript='"policy.pt"'
"""

import argparse
import math

import torch
from torch import nn


class Residual(nn.Module):
    """x + W2 tanh(W1 LayerNorm(x))."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.inner = nn.Linear(width, width)
        self.outer = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.outer(torch.tanh(self.inner(self.norm(x))))


class ResidualPolicy(nn.Module):
    def __init__(self, obs_dim: int, actions: int, width: int = 64, blocks: int = 2):
        super().__init__()
        self.embed = nn.Linear(obs_dim, width)
        self.blocks = nn.Sequential(*[Residual(width) for _ in range(blocks)])
        self.norm = nn.LayerNorm(width)
        self.policy = nn.Linear(width, actions)
        self.value = nn.Linear(width, 1)
        # The PPO recipe's initialisation: orthogonal, a near-uniform first policy.
        for layer in self.modules():
            if isinstance(layer, nn.Linear):
                nn.init.orthogonal_(layer.weight, math.sqrt(2))
                nn.init.zeros_(layer.bias)
        nn.init.orthogonal_(self.policy.weight, 0.01)
        nn.init.orthogonal_(self.value.weight, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.tanh(self.norm(self.blocks(self.embed(obs))))
        return self.policy(x), self.value(x)


class TwoMlps(nn.Module):
    """What fleetrl's own `[model] hidden_sizes = [64, 64]` builds (separate tanh MLPs for the
    policy and the value), as a module: to time the TorchScript path against fleetrl's."""

    def __init__(self, obs_dim: int, actions: int, width: int = 64):
        super().__init__()

        def mlp(out: int, gain: float) -> nn.Sequential:
            layers = [nn.Linear(obs_dim, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh()]
            head = nn.Linear(width, out)
            for layer in layers[::2]:
                nn.init.orthogonal_(layer.weight, math.sqrt(2))
                nn.init.zeros_(layer.bias)
            nn.init.orthogonal_(head.weight, gain)
            nn.init.zeros_(head.bias)
            return nn.Sequential(*layers, head)

        self.pi = mlp(actions, 0.01)
        self.vf = mlp(1, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pi(obs), self.vf(obs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--obs-dim", type=int, required=True, help="observation width D")
    parser.add_argument("--actions", type=int, required=True, help="n actions, or A dims")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--arch",
        choices=["residual", "two-mlps"],
        default="residual",
        help="two-mlps: the network fleetrl's cartpole-ppo preset builds itself",
    )
    parser.add_argument("--out", required=True, help="the .pt file to write")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    network = ResidualPolicy if args.arch == "residual" else TwoMlps
    module = torch.jit.script(network(args.obs_dim, args.actions))
    torch.jit.save(module, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
