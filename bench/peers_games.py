"""The games of bench/peers.sh and their targets, read by bench/peers.py (in each peer's venv)
and bench/peers_table.py.

Targets are on the running mean of the last 100 training-episode returns, the measure every
system reports (fleetrl as `episode_return` in its TensorBoard events and
`recent_training_return` in summary.json). CartPole-v1: 475, gymnasium's reward threshold
(fleetrl also stops there, on its own evaluation). MinAtar Breakout has no threshold; 4.0 was
fixed before the seeded runs it is used on: it is under every 200k-step end measured earlier at
the constant learning rate (Sample Factory 4.3 and 4.8 in two runs of seed 0, fleetrl 4.26 and
4.48 on seeds 0 and 1: docs/benchmarks.md), so each system can reach it within the bench's
budget, and over the ends of slower runs (fleetrl's decaying rate 3.52 and 3.76, RLlib 3.3 at
131k, PufferLib 3.0 at 73k), so when it is reached tells learning pace apart.
"""

GYM_IDS = {"cartpole": "CartPole-v1", "breakout": "MinAtar/Breakout-v1"}
TARGETS = {"cartpole": 475.0, "breakout": 4.0}
