#!/usr/bin/env python3
"""Reference returns, advantages and V-trace targets on random inputs, for core/tests/returns_fixture.rs.

An independent implementation in numpy, written from the papers' closed forms rather than the
backward recursions the Rust code uses:

- GAE (Schulman et al. 2016, eq. 16): A_t = sum_{k>=t} (gamma lambda)^(k-t) delta_k, up to the end of
  the episode or of the unroll, delta_k = r_k + gamma V_next(k) - V_k.
- Discounted return: R_t = sum_{k=t}^{e} gamma^(k-t) r_k + gamma^(e-t+1) V_next(e).
- V-trace (Espeholt et al. 2018, eq. 1): v_s = V_s + sum_{t=s}^{e} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t,
  delta_t = rho_t (r_t + gamma V_next(t) - V_t), rho_t = min(rho_bar, ratio), c_i = lambda min(c_bar, ratio);
  pg advantage = min(pg_rho_bar, ratio) (r_s + gamma (lambda v_{s+1} + (1 - lambda) V_next(s)) - V_s)
  (rlax's q-estimate), with v_{s+1} = V_next(s) where the episode or unroll ends at s.
- valid_from_done (rlpyt): 1 up to and including the first done of a column, then 0.
- Advantage normalisation over valid entries with the population std.

V_next(t) is the done convention of fleetrl: 0 after a terminal step; V(final obs) after a
truncated step when truncation bootstraps, else 0; V(x_T) (the bootstrap value) after the last
step; V_{t+1} otherwise. e is the first step >= t that is terminal, truncated or the last.

Usage (from the repository root; any Python 3 with numpy):
    python3 -m venv /tmp/np && /tmp/np/bin/pip install numpy
    /tmp/np/bin/python scripts/gen_returns_fixture.py
"""

import json
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "core", "tests", "fixtures", "returns_reference.json")
T, B = 9, 4
SEED = 20261121


def v_next(d, t, b, bootstrap_truncation):
    if d["terminated"][t, b]:
        return 0.0
    if d["truncated"][t, b]:
        return d["final_value"][t, b] if bootstrap_truncation else 0.0
    if t == T - 1:
        return d["bootstrap_value"][b]
    return d["value"][t + 1, b]


def episode_end(d, t, b):
    for k in range(t, T):
        if d["terminated"][k, b] or d["truncated"][k, b]:
            return k
    return T - 1


def gae(d, gamma, lam, bt):
    adv = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            e = episode_end(d, t, b)
            for k in range(t, e + 1):
                delta = d["reward"][k, b] + gamma * v_next(d, k, b, bt) - d["value"][k, b]
                adv[t, b] += (gamma * lam) ** (k - t) * delta
    return adv, adv + d["value"]


def discounted(d, gamma, bt):
    ret = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            e = episode_end(d, t, b)
            rewards = sum(gamma ** (k - t) * d["reward"][k, b] for k in range(t, e + 1))
            ret[t, b] = rewards + gamma ** (e - t + 1) * v_next(d, e, b, bt)
    return ret


def vtrace(d, log_rho, gamma, lam, rho_bar, pg_rho_bar, c_bar, bt):
    ratio = np.exp(log_rho)
    rho = np.minimum(rho_bar, ratio)
    c = lam * np.minimum(c_bar, ratio)
    vs = np.zeros((T, B))
    pg = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            e = episode_end(d, s, b)
            total = 0.0
            for t in range(s, e + 1):
                delta = rho[t, b] * (d["reward"][t, b] + gamma * v_next(d, t, b, bt) - d["value"][t, b])
                total += gamma ** (t - s) * np.prod(c[s:t, b]) * delta
            vs[s, b] = d["value"][s, b] + total
    for b in range(B):
        for s in range(T):
            nv = v_next(d, s, b, bt)
            ends = s == episode_end(d, s, b)
            next_vs = nv if ends else vs[s + 1, b]
            q = d["reward"][s, b] + gamma * (lam * next_vs + (1 - lam) * nv)
            pg[s, b] = min(pg_rho_bar, ratio[s, b]) * (q - d["value"][s, b])
    return vs, pg


def valid_from_done(done):
    ended_before = np.cumsum(done, axis=0) - done
    return (ended_before == 0).astype(np.float64)


def normalize(adv, valid):
    mean = (adv * valid).sum() / valid.sum()
    std = np.sqrt((((adv - mean) ** 2) * valid).sum() / valid.sum())
    return valid * (adv - mean) / max(std, 1e-8)


def random_data(rng):
    terminated = rng.random((T, B)) < 0.15
    truncated = (rng.random((T, B)) < 0.1) & ~terminated
    return {
        "reward": rng.normal(size=(T, B)),
        "value": rng.normal(size=(T, B)),
        "terminated": terminated,
        "truncated": truncated,
        "final_value": np.where(truncated, rng.normal(size=(T, B)), 0.0),
        "bootstrap_value": rng.normal(size=B),
    }


def flat(x):
    return [float(v) for v in np.asarray(x, dtype=np.float64).reshape(-1)]


def main():
    rng = np.random.default_rng(SEED)
    cases = []
    for _ in range(3):
        d = random_data(rng)
        log_rho = rng.normal(scale=0.6, size=(T, B))
        case = {
            "t": T,
            "b": B,
            "reward": flat(d["reward"]),
            "value": flat(d["value"]),
            "terminated": [bool(x) for x in d["terminated"].reshape(-1)],
            "truncated": [bool(x) for x in d["truncated"].reshape(-1)],
            "final_value": flat(d["final_value"]),
            "bootstrap_value": flat(d["bootstrap_value"]),
            "log_rho": flat(log_rho),
            "gae": [],
            "discounted": [],
            "vtrace": [],
        }
        for gamma, lam, bt in [(0.99, 0.95, True), (0.9, 0.8, False), (0.97, 0.0, True), (0.95, 1.0, True)]:
            adv, ret = gae(d, gamma, lam, bt)
            case["gae"].append({"discount": gamma, "lambda": lam, "bootstrap_truncation": bt,
                                "advantage": flat(adv), "returns": flat(ret)})
        for gamma, bt in [(0.99, True), (0.9, False)]:
            case["discounted"].append({"discount": gamma, "bootstrap_truncation": bt,
                                       "returns": flat(discounted(d, gamma, bt))})
        for gamma, lam, rho_bar, pg_rho_bar, c_bar, bt in [
            (0.99, 1.0, 1.0, 1.0, 1.0, True),   # the paper / scalable_agent
            (0.9, 0.9, 0.5, 2.0, 0.8, True),    # every knob away from 1
            (0.95, 1.0, 1e9, 1e9, 1e9, False),  # no clipping, truncation as terminal
            (0.99, 0.7, 1.0, 1.0, 1.0, True),   # rlax lambda
        ]:
            vs, pg = vtrace(d, log_rho, gamma, lam, rho_bar, pg_rho_bar, c_bar, bt)
            case["vtrace"].append({"discount": gamma, "lambda": lam, "rho_bar": rho_bar,
                                   "pg_rho_bar": pg_rho_bar, "c_bar": c_bar, "bootstrap_truncation": bt,
                                   "vs": flat(vs), "pg_advantage": flat(pg)})
        done = d["terminated"] | d["truncated"]
        valid = valid_from_done(done)
        adv, _ = gae(d, 0.99, 0.95, True)
        case["valid"] = flat(valid)
        case["normalized_advantage"] = flat(normalize(adv, valid))
        case["normalized_advantage_all"] = flat(normalize(adv, np.ones_like(valid)))
        cases.append(case)
    with open(OUT, "w") as f:
        json.dump({"generator": "scripts/gen_returns_fixture.py", "seed": SEED, "cases": cases}, f)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
