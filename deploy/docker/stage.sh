#!/usr/bin/env bash
# Assembles fleetrl's runtime tree from built binaries: /opt/fleetrl/{bin,lib,configs}, the
# binaries' rpath pointing at ../lib, and only the shared libraries they load (the CPU variant
# drops the learner's libtorch_cuda link, so none of the CUDA wheel's large libraries come
# along). Used by build-local.sh (scratch image from this machine) and by the Dockerfile's
# build stage (registry path), so both images hold the same tree.
#
# usage: stage.sh --bin-dir DIR --libtorch DIR --out DIR [--gpu] [--system-libs] [--bins "B..."]
#   --bins         stage only these binaries (default: all five); `fleet-replay-server` alone
#                  needs neither libtorch nor libpython, so its tree has none
#   --gpu          keep the learner's libtorch_cuda link and ship its CUDA closure (GBs)
#   --system-libs  also copy glibc, libstdc++ and the loader (for a FROM scratch image)
set -euo pipefail

bin_dir="" libtorch="" out="" gpu=0 system_libs=0 bins=(fleet-actor fleet-learner fleet-replay-server fleet-serve fleetrl)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --libtorch) libtorch="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --gpu) gpu=1; shift ;;
    --system-libs) system_libs=1; shift ;;
    --bins) read -r -a bins <<<"$2"; shift 2 ;;
    *) echo "stage.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$bin_dir" && -n "$libtorch" && -n "$out" ]] || {
  echo "usage: stage.sh --bin-dir DIR --libtorch DIR --out DIR [--gpu] [--system-libs]" >&2
  exit 2
}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
patchelf="${PATCHELF:-$(command -v patchelf || true)}"
[[ -x "$patchelf" ]] || { echo "stage.sh: patchelf not found (set PATCHELF)" >&2; exit 1; }
libtorch="$(cd "$libtorch" && pwd -P)"

rm -rf "$out"
mkdir -p "$out/opt/fleetrl/bin" "$out/opt/fleetrl/lib" "$out/opt/fleetrl/configs"
for b in "${bins[@]}"; do
  [[ -x "$bin_dir/$b" ]] || {
    echo "stage.sh: $bin_dir/$b missing; build with: cargo build --release --bins" >&2
    exit 1
  }
  install -m 0755 "$bin_dir/$b" "$out/opt/fleetrl/bin/$b"
  "$patchelf" --set-rpath '$ORIGIN/../lib' "$out/opt/fleetrl/bin/$b"
  if [[ $gpu == 0 ]]; then
    "$patchelf" --remove-needed libtorch_cuda.so "$out/opt/fleetrl/bin/$b"
  fi
done
cp "$repo"/configs/*.toml "$out/opt/fleetrl/configs/"

# The shared-library closure, resolved the way the loader will at run time.
declare -A seen=()
for b in "${bins[@]}"; do
  while read -r name path; do
    [[ -n "$path" && -z "${seen[$path]:-}" ]] || continue
    seen[$path]=1
    real="$(readlink -f "$path")"
    case "$real" in
      "$(dirname "$libtorch")"/*)
        # libtorch and the nvidia wheels' libraries: beside the binaries, under their soname.
        install -m 0755 "$real" "$out/opt/fleetrl/lib/$name" ;;
      */libpython3*)
        # libpython (linked for gym: envs; loaded always, initialised only when a gymnasium
        # env is made): beside the binaries. Later binaries resolve it there already.
        [[ "$real" -ef "$out/opt/fleetrl/lib/$name" ]] || install -m 0755 "$real" "$out/opt/fleetrl/lib/$name" ;;
      *)
        if [[ $system_libs == 1 ]]; then
          mkdir -p "$out$(dirname "$path")"
          install -m 0755 "$real" "$out$path"
        fi ;;
    esac
  done < <(LD_LIBRARY_PATH="$libtorch/lib" ldd "$out/opt/fleetrl/bin/$b" \
             | awk '/=> \// {print $1, $3}')
done
# CUDA libraries load companions with dlopen (cuDNN its engines, libtorch_cuda NVRTC), which
# ldd cannot see: the GPU variant takes every library in the directories its closure came from.
if [[ $gpu == 1 ]]; then
  for path in "${!seen[@]}"; do
    real="$(readlink -f "$path")"
    case "$real" in
      "$(dirname "$libtorch")"/nvidia/*)
        for lib in "$(dirname "$real")"/*.so*; do
          [[ -e "$out/opt/fleetrl/lib/$(basename "$lib")" ]] || install -m 0755 "$lib" "$out/opt/fleetrl/lib/"
        done ;;
    esac
  done
  for lib in libcaffe2_nvrtc.so libtorch_cuda_linalg.so; do # dlopened by libtorch_cuda
    [[ -e "$libtorch/lib/$lib" ]] && install -m 0755 "$libtorch/lib/$lib" "$out/opt/fleetrl/lib/"
  done
fi
# The loader itself (ldd prints it without "=>").
if [[ $system_libs == 1 ]]; then
  loader="$(readelf -l "$out/opt/fleetrl/bin/${bins[0]}" | sed -n 's/.*interpreter: \(.*\)]/\1/p')"
  mkdir -p "$out$(dirname "$loader")"
  install -m 0755 "$(readlink -f "$loader")" "$out$loader"
fi
# libtorch_cpu's own RPATH includes $ORIGIN, so its dependencies resolve in lib/ as well.
echo "staged $(du -sh "$out" | cut -f1) in $out"
