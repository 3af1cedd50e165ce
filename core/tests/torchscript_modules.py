"""Writes the TorchScript modules core/tests/torchscript_model.rs loads: ones that fit
`model.torchscript`'s actor-critic interface, the off-policy ones (a Q-network, SAC's actor and
critic), and ones that do not.

    python core/tests/torchscript_modules.py DIR
"""

import sys
from pathlib import Path

import torch
from torch import nn


class Fits(nn.Module):
    """forward(obs [N, 4]) -> (logits [N, 2], value [N, 1]), with a layer norm."""

    def __init__(self, out: int = 2):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Tanh())
        self.pi = nn.Linear(8, out)
        self.vf = nn.Linear(8, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.body(obs)
        return self.pi(x), self.vf(x)


class OwnLogStd(Fits):
    """forward(obs) -> (mean [N, 2], log_std [2], value [N]) for a 2-d Gaussian."""

    def __init__(self):
        super().__init__()
        self.log_std = nn.Parameter(torch.full((2,), -0.5))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.body(obs)
        return self.pi(x), self.log_std, self.vf(x).squeeze(1)


class OneTensor(Fits):
    """Returns the logits only."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(self.body(obs))


class NoForward(nn.Module):
    """Has `act` but no `forward`."""

    def __init__(self):
        super().__init__()
        self.pi = nn.Linear(4, 2)

    @torch.jit.export
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(obs)


class QNet(nn.Module):
    """forward(obs [N, 4]) -> q [N, out], with a layer norm."""

    def __init__(self, out: int = 2):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.ReLU())
        self.q = nn.Linear(8, out)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(self.body(obs))


class Actor(nn.Module):
    """forward(obs [N, 4]) -> (mean [N, 2], log_std [N, 2])."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.ReLU())
        self.mean = nn.Linear(8, 2)
        self.log_std = nn.Linear(8, 2)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.body(obs)
        return self.mean(x), self.log_std(x)


class Critic(nn.Module):
    """forward(obs [N, 4], action [N, 2]) -> q [N]."""

    def __init__(self, out: int = 1):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.ReLU())
        self.q = nn.Linear(8, out)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.q(self.body(torch.cat([obs, action], dim=1))).squeeze(1)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.script(Fits()).save(str(out / "fits.pt"))
    torch.jit.script(OwnLogStd()).save(str(out / "own_log_std.pt"))
    torch.jit.script(OneTensor()).save(str(out / "one_tensor.pt"))
    # Three logits where the env has two actions.
    torch.jit.script(Fits(out=3)).save(str(out / "wrong_width.pt"))
    torch.jit.script(NoForward()).save(str(out / "no_forward.pt"))
    torch.jit.script(QNet()).save(str(out / "q.pt"))
    torch.jit.script(QNet(out=3)).save(str(out / "q_wide.pt"))
    torch.jit.script(Actor()).save(str(out / "actor.pt"))
    torch.jit.script(Critic()).save(str(out / "critic.pt"))


if __name__ == "__main__":
    main()
