"""How far an off-policy actor acts ahead of its learner, read off the roles' metrics.

Runs `fleetrl train --metrics-listen` (every role serves its metrics, one port each: the
replay server, the learner, then the actor) with no evaluation before the end, and twice a
second reads the actor's `env_steps_total` and `policy_version` (the version acting now;
`actors.rollout_length = 1` so both move every step) and the learner's `updates_total`. Once updates have begun, the actor's policy lag in updates
is

    lag = (env steps acted - min_size) * updates per env step - version acting * publish_interval

the updates a step-then-update loop would have made by this env step, less the updates the
acting weights have (version k is published after k * publish_interval updates). SB3's
off-policy loop (`train_freq = 1`, `gradient_steps = 1`) acts one step and then updates once,
so its lag is 0 or 1 by construction. fleetrl's comes from the steps the actor acted that the
learner has not trained on yet (queued in the actor, in flight, inside the rate limiter's
slack) and the updates since the last publish.

    .venv/bin/python bench/policy_lag.py PRESET STEPS [KEY=VALUE ...]

prints one JSON line: the samples' median, mean, 90th percentile and max, and env steps/s.
bench/policy_lag.sh runs it for the default pipeline and for `items_per_request = 1`.
"""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.path.join(ROOT, "target", "release")


def free_ports(n):
    """The first of n loopback ports in a row that were free a moment ago."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            base = first.getsockname()[1]
            rest = []
            try:
                for i in range(1, n):
                    s = socket.socket()
                    rest.append(s)
                    s.bind(("127.0.0.1", base + i))
                return base
            except OSError:
                continue
            finally:
                for s in rest:
                    s.close()
    raise SystemExit(f"no {n} free loopback ports in a row")


def metrics(port):
    """The numeric samples of one role's /metrics page, by name (labels dropped)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        out[name.split("{")[0]] = float(value)
    return out


def preset_config(preset, sets):
    """configs/PRESET.toml with the `KEY=VALUE` overrides applied (TOML values)."""
    with open(os.path.join(ROOT, "configs", f"{preset}.toml"), "rb") as f:
        config = tomllib.load(f)
    for item in sets:
        key, value = item.split("=", 1)
        *path, last = key.split(".")
        table = config
        for part in path:
            table = table.setdefault(part, {})
        table[last] = tomllib.loads(f"v = {value}")["v"]
    return config


def setting(config, key):
    """A dotted key the preset must set (its defaults live in the Rust code, not here)."""
    value = config
    for part in key.split("."):
        if part not in value:
            raise SystemExit(f"the preset does not set `{key}`; pass it as {key}=VALUE")
        value = value[part]
    return value


def main():
    preset, steps, sets = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    config = preset_config(preset, sets)
    work = tempfile.mkdtemp(prefix="policy-lag-")
    base = free_ports(3)
    m_learner, m_actor = base + 1, base + 2
    args = [f"--set={s}" for s in [
        "actors.rollout_length=1", f"stop.total_env_steps={2 * steps}",
        f"eval.interval_env_steps={2 * steps}", "stop.max_wall_seconds=3600", *sets]]
    log = open(os.path.join(work, "train.log"), "w")
    procs = [subprocess.Popen(
        [f"{BIN}/fleetrl", "train", "--config", preset, "--out", os.path.join(work, "run"),
         "--metrics-listen", f"127.0.0.1:{base}", *args],
        stdout=subprocess.DEVNULL, stderr=log)]
    try:
        per_step = setting(config, "algo.replay.samples_per_insert") / setting(
            config, "algo.replay.batch_size")
        min_size = setting(config, "algo.replay.min_size")
        interval = setting(config, "algo.publish_interval")
        leads, first, last = [], None, None
        deadline = time.monotonic() + 3600
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.5)
            a, l = metrics(m_actor), metrics(m_learner)
            if "fleetrl_learner_updates_total" not in l or "fleetrl_actor_env_steps_total" not in a:
                continue
            acted, updates = a["fleetrl_actor_env_steps_total"], l["fleetrl_learner_updates_total"]
            if acted >= steps:
                break
            if updates < 100:
                continue  # before the first updates settle
            version = a["fleetrl_actor_policy_version"]
            leads.append((acted - min_size) * per_step - version * interval)
            first = first or (time.monotonic(), acted)
            last = (time.monotonic(), acted)
        if not leads:
            raise SystemExit(f"no samples; the run's logs are in {work}")
        leads.sort()
        print(json.dumps({
            "preset": preset, "sets": sets, "samples": len(leads),
            "median": statistics.median(leads), "mean": round(statistics.fmean(leads), 1),
            "p90": leads[int(0.9 * (len(leads) - 1))], "max": leads[-1],
            "env_steps_per_s": round((last[1] - first[1]) / max(last[0] - first[0], 1e-9), 1),
        }))
    finally:
        # The launcher's roles get SIGTERM when it dies (no checkpoint or evaluation to wait for).
        for p in procs:
            p.kill()
            p.wait()
        if os.environ.get("KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
