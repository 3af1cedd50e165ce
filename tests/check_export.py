"""Runs files written by `fleetrl export` with plain PyTorch and onnxruntime on the observations
tests/tests/export.rs recorded, and reports how far their actions are from fleetrl's own.

    python tests/check_export.py DIR...

Each DIR holds manifest.json ({"rows", "obs_dim", "state", "discrete", "files"}), obs.f32
[rows, obs_dim], h.f32 and c.f32 [rows, state] when recurrent, and expected.i64 [rows] or
expected.f32 [rows, A]. Prints one JSON object: per directory and file, the rows whose action
differs (discrete) or the largest absolute difference (continuous).
"""

import json
import sys
from pathlib import Path

import numpy as np


def read(directory: Path, name: str, dtype, shape) -> np.ndarray:
    return np.fromfile(directory / name, dtype=dtype).reshape(shape)


def run_torchscript(path: Path, inputs: list) -> np.ndarray:
    import torch

    module = torch.jit.load(str(path))
    with torch.no_grad():
        out = module(*[torch.from_numpy(x) for x in inputs])
    out = out[0] if isinstance(out, (tuple, list)) else out
    return out.numpy()


def run_onnx(path: Path, inputs: list) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))[0]


def check(directory: Path) -> dict:
    manifest = json.loads((directory / "manifest.json").read_text())
    rows, obs_dim, state = manifest["rows"], manifest["obs_dim"], manifest["state"]
    inputs = [read(directory, "obs.f32", np.float32, (rows, obs_dim))]
    if state > 0:
        inputs += [read(directory, f"{x}.f32", np.float32, (rows, state)) for x in "hc"]
    if manifest["discrete"]:
        expected = read(directory, "expected.i64", np.int64, (rows,))
    else:
        expected = read(directory, "expected.f32", np.float32, (rows, -1))
    report = {}
    for name in manifest["files"]:
        path = directory / name
        run = run_onnx if name.endswith(".onnx") else run_torchscript
        got = run(path, inputs)
        if manifest["discrete"]:
            report[name] = {"rows": rows, "differing": int((got != expected).sum())}
        else:
            diff = float(np.abs(got.astype(np.float64) - expected).max())
            report[name] = {"rows": rows, "max_abs_diff": diff}
    return report


def main() -> None:
    print(json.dumps({d: check(Path(d)) for d in sys.argv[1:]}))


if __name__ == "__main__":
    main()
