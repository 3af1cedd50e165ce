"""The learner update of bench/learner_update.sh in PyTorch eager: one PPO gradient step of
the Nature-CNN actor-critic (forward, clipped surrogate + value + entropy loss, backward,
gradient-norm clipping, Adam) on a batch of 4x84x84 uint8 frames. Prints one JSON line."""

import argparse
import json
import math
import time

import torch
from torch import nn

ACTIONS = 6


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
        )
        self.pi = nn.Linear(512, ACTIONS)
        self.vf = nn.Linear(512, 1)

    def forward(self, frames):
        h = self.encoder(frames.float() / 255.0)
        return self.pi(h), self.vf(h).squeeze(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    net = Net().to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=2.5e-4, eps=1e-5)
    b = a.batch
    # The batch starts on the CPU, as a learner receives it.
    frames = torch.randint(0, 256, (b, 4, 84, 84), dtype=torch.uint8)
    action = torch.randint(0, ACTIONS, (b,))
    old_log_prob = torch.full((b,), -math.log(ACTIONS))
    old_value, advantage, returns = torch.randn(b), torch.randn(b), torch.randn(b)

    def step():
        f, act, olp, ov, adv, ret = (t.to(dev) for t in
                                     (frames, action, old_log_prob, old_value, advantage, returns))
        opt.zero_grad()
        logits, value = net(f)
        log_probs = logits.log_softmax(-1)
        log_prob = log_probs.gather(1, act.unsqueeze(1)).squeeze(1)
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
        ratio = (log_prob - olp).exp()
        pg = -torch.min(ratio * adv, ratio.clamp(0.9, 1.1) * adv).mean()
        clipped = ov + (value - ov).clamp(-0.1, 0.1)
        vf = torch.max((value - ret) ** 2, (clipped - ret) ** 2).mean()
        (pg + 0.5 * vf - 0.01 * entropy).backward()
        nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    start = time.perf_counter()
    for _ in range(a.iters):
        step()
    seconds = (time.perf_counter() - start) / a.iters
    print(json.dumps({
        "system": "pytorch-eager", "devices": [a.device], "batch": b,
        "torch_threads": torch.get_num_threads(), "iters": a.iters,
        "seconds_per_update": seconds, "updates_per_second": 1.0 / seconds,
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
