#!/usr/bin/env bash
# Installs what fleetrl needs to build and run, once: a project-local virtualenv (.venv) with
# PyTorch 2.11.0 from PyPI (libtorch for tch 0.24), then a release build of every binary.
# Safe to run again: each step checks whether it is already done and skips itself.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

TORCH_VERSION="2.11.0"
GYMNASIUM_VERSION="1.4.0"
CUDA_CRT_VERSION="13.0.88"
CUDA_CCCL_VERSION="13.0.85"
ENVPOOL_VERSION="1.2.5"
SB3_VERSION="2.9.2"
ONNX_VERSION="1.23.2"
ONNXRUNTIME_VERSION="1.31.1"
MINARI_VERSION="0.5.4"
JAX_VERSION="0.10.2"
H5PY_VERSION="3.16.0"
venv="$root/.venv"
log() { printf '[setup] %s\n' "$*" >&2; }

python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  for candidate in python3 python3.12 python3.11 python3.10; do
    if "$candidate" -c 'import sys, venv; assert sys.version_info >= (3, 10)' >/dev/null 2>&1; then
      python_bin="$candidate"; break
    fi
  done
fi
[ -n "$python_bin" ] || { log "error: no python3 found; install Python 3.10+ first"; exit 1; }

if [ ! -x "$venv/bin/python" ]; then
  log "creating virtualenv $venv with $python_bin"
  "$python_bin" -m venv "$venv"
fi

installed="$("$venv/bin/python" - <<'PY' 2>/dev/null || true
import importlib.metadata as m
try:
    print(m.version("torch"))
except m.PackageNotFoundError:
    pass
PY
)"
if [ "${installed%%+*}" != "$TORCH_VERSION" ]; then
  log "installing torch==$TORCH_VERSION from PyPI into $venv (about 4.5 GB, a few minutes)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$TORCH_VERSION"
else
  log "torch $installed already installed"
fi

# The CUDA graph shim (core/csrc/cuda_graph.cpp, `learner.cuda_graph`) compiles against
# libtorch's CUDA headers, which include the CUDA runtime's; the wheels torch pulls in ship
# those but not the `crt/` headers they include, which come in this 130 KB wheel of headers.
# The c10d shim's ProcessGroupNCCL (core/csrc/c10d.cpp, `learner.collective_backend = "nccl"`)
# also needs CCCL's `nv/target`, from a 3 MB wheel of headers (nccl.h comes with torch).
if [ -d "$venv/lib/python"*/site-packages/nvidia/cu13 ] &&
  ! "$venv/bin/python" -c 'import importlib.metadata as m; assert m.version("nvidia-cuda-crt") == "'"$CUDA_CRT_VERSION"'"; assert m.version("nvidia-cuda-cccl") == "'"$CUDA_CCCL_VERSION"'"' >/dev/null 2>&1; then
  log "installing nvidia-cuda-crt==$CUDA_CRT_VERSION and nvidia-cuda-cccl==$CUDA_CCCL_VERSION (CUDA headers) into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    "nvidia-cuda-crt==$CUDA_CRT_VERSION" "nvidia-cuda-cccl==$CUDA_CCCL_VERSION"
fi

torch_dir="$("$venv/bin/python" -W ignore -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)"
# A stable path to libtorch whatever the Python version: .cargo/config.toml points LIBTORCH at
# it, and the binaries' rpath resolves through it.
ln -sfn "$(realpath --relative-to="$venv" "$torch_dir")" "$venv/libtorch"

# gymnasium envs in the actor (`gym:` ids): gymnasium with MuJoCo and the Atari ROMs (ale-py),
# and EnvPool (`envpool:` ids), all wheels. Skipped when already installed.
if ! "$venv/bin/python" -c 'import gymnasium, mujoco, ale_py, imageio, envpool; assert gymnasium.__version__ == "'"$GYMNASIUM_VERSION"'"; assert envpool.__version__ == "'"$ENVPOOL_VERSION"'"' >/dev/null 2>&1; then
  log "installing gymnasium[mujoco]==$GYMNASIUM_VERSION, ale-py and envpool==$ENVPOOL_VERSION into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "gymnasium[mujoco]==$GYMNASIUM_VERSION" ale-py "envpool==$ENVPOOL_VERSION"
else
  log "gymnasium $GYMNASIUM_VERSION, mujoco, ale-py and envpool $ENVPOOL_VERSION already installed"
fi
# Stable-Baselines3, the reference the parity tests (core/tests/sb3_parity.rs) run one update
# of each algorithm against. 2.9.2 installs alone here (2.7 would take gymnasium down to
# 1.2.3); it keeps torch 2.11.0. Measured: 3 s to download and install (no pip cache) on a
# shared machine.
if ! "$venv/bin/python" -c 'import importlib.metadata as m; assert m.version("stable-baselines3") == "'"$SB3_VERSION"'"' >/dev/null 2>&1; then
  log "installing stable-baselines3==$SB3_VERSION into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "stable-baselines3==$SB3_VERSION"
else
  log "stable-baselines3 $SB3_VERSION already installed"
fi
# `fleetrl export --format onnx` runs PyTorch's ONNX exporter, which needs onnx; the export
# tests run the file with onnxruntime. Wheels, both installed cleanly beside torch 2.11.0.
if ! "$venv/bin/python" -c 'import importlib.metadata as m; assert m.version("onnx") == "'"$ONNX_VERSION"'"; assert m.version("onnxruntime") == "'"$ONNXRUNTIME_VERSION"'"' >/dev/null 2>&1; then
  log "installing onnx==$ONNX_VERSION and onnxruntime==$ONNXRUNTIME_VERSION into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    "onnx==$ONNX_VERSION" "onnxruntime==$ONNXRUNTIME_VERSION"
else
  log "onnx $ONNX_VERSION and onnxruntime $ONNXRUNTIME_VERSION already installed"
fi
# Minari datasets (`minari:` demo keys, `fleetrl record --out minari:ID`): minari with its
# HDF5 storage (h5py) and, for its `DataCollector` (`minari[create]`), jax and jaxlib. Wheels;
# beside torch 2.11.0 and numpy 2.4 they installed cleanly in 26 s (they add scipy, pydantic,
# typer and rich; numpy and torch are untouched).
if ! "$venv/bin/python" -c 'import importlib.metadata as m; assert m.version("minari") == "'"$MINARI_VERSION"'"; assert m.version("jax") == "'"$JAX_VERSION"'"; assert m.version("h5py") == "'"$H5PY_VERSION"'"' >/dev/null 2>&1; then
  log "installing minari[create,hdf5]==$MINARI_VERSION (jax $JAX_VERSION, h5py $H5PY_VERSION) into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    "minari[create,hdf5]==$MINARI_VERSION" "jax==$JAX_VERSION" "jaxlib==$JAX_VERSION" "h5py==$H5PY_VERSION"
else
  log "minari $MINARI_VERSION already installed"
fi
# Meta-World (`MetaWorld/` ids): metaworld 3.1.1 pins mujoco 3.3.0 and fails on the mujoco 4.0
# that gymnasium's MuJoCo envs use above, so it goes with its own mujoco (and scipy, which it
# imports) into a directory of its own that only Meta-World processes put on sys.path: the
# rest of the venv keeps mujoco 4.0. Wheels only; the pins are in metaworld-requirements.txt.
metaworld_dir="$venv/metaworld"
metaworld_pins="$root/scripts/metaworld-requirements.txt"
metaworld_stamp="$metaworld_dir/.fleetrl-$(sha256sum "$metaworld_pins" | cut -c1-12)"
if [ ! -f "$metaworld_stamp" ]; then
  log "installing metaworld (scripts/metaworld-requirements.txt) into $metaworld_dir"
  rm -rf "$metaworld_dir"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --target "$metaworld_dir" -r "$metaworld_pins"
  touch "$metaworld_stamp"
else
  log "metaworld already installed in $metaworld_dir"
fi
# The embedded Python (fleetrl-core's `python` feature) links libpython: the binaries' rpath
# resolves it through .venv/libpython, a link to the venv's base Python library directory.
py_libdir="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"
ln -sfn "$py_libdir" "$venv/libpython"

if [ "${FLEETRL_SKIP_BUILD:-0}" != 1 ]; then
  log "building release binaries (the first build takes several minutes)"
  cargo build --release --workspace --bins
fi
