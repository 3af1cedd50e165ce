#!/usr/bin/env bash
# The base layer of `build-local.sh --python`: a minimal Debian bookworm root filesystem
# (debootstrap from the Debian mirror) with python3 and a virtualenv /opt/fleetrl/python
# holding gymnasium (with MuJoCo) and ale-py, Meta-World in /opt/fleetrl/python/metaworld
# (with the mujoco it pins), plus the image's user. Written as a reproducible
# tarball; the root filesystem is cached in ROOTFS and reused while it is complete.
#
# usage: debian-python.sh ROOTFS OUT.tar
set -euo pipefail
rootfs="$1" out="$2"
packages=("gymnasium[mujoco]" "ale-py")
if [[ ! -f "$rootfs/.complete" ]]; then
  command -v debootstrap >/dev/null || {
    echo "debian-python.sh: debootstrap is needed (apt-get install debootstrap)" >&2
    exit 1
  }
  rm -rf "$rootfs"
  echo "[debian-python] debootstrap bookworm into $rootfs" >&2
  debootstrap --variant=minbase --include=python3,python3-venv,libstdc++6 \
    bookworm "$rootfs" http://deb.debian.org/debian >"$rootfs.log" 2>&1 \
    || { tail -20 "$rootfs.log" >&2; exit 1; }
  chroot "$rootfs" python3 -m venv --without-pip /opt/fleetrl/python
  site="$(echo "$rootfs"/opt/fleetrl/python/lib/python3.*/site-packages)"
  # The host's pip fetches the wheels (the chroot has none and no proxy settings); the
  # host's Python must have the chroot's minor version for the wheels' tags to match.
  chroot_py="$(chroot "$rootfs" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  python3 -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    --python-version "$chroot_py" --target "$site" "${packages[@]}"
  chroot "$rootfs" /opt/fleetrl/python/bin/python -c 'import gymnasium, mujoco, ale_py'
  # Meta-World with the mujoco it pins, in the directory of its own that MetaWorld/ ids put
  # first on sys.path (FLEETRL_VENV/metaworld; see scripts/metaworld-requirements.txt).
  python3 -m pip install --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
    --python-version "$chroot_py" --target "$rootfs/opt/fleetrl/python/metaworld" \
    -r "$(dirname "${BASH_SOURCE[0]}")/../../scripts/metaworld-requirements.txt"
  chroot "$rootfs" /opt/fleetrl/python/bin/python -c \
    'import sys; sys.path.insert(0, "/opt/fleetrl/python/metaworld"); import metaworld, mujoco
assert mujoco.__version__ == "3.3.0", mujoco.__version__'
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/locale
  grep -q '^fleetrl:' "$rootfs/etc/passwd" || {
    echo 'fleetrl:x:65532:65532:fleetrl:/var/lib/fleetrl:/usr/sbin/nologin' >>"$rootfs/etc/passwd"
    echo 'fleetrl:x:65532:' >>"$rootfs/etc/group"
  }
  touch "$rootfs/.complete"
fi
tar --sort=name --mtime=@0 --numeric-owner --exclude=./.complete --exclude=./dev \
  --exclude=./proc --exclude=./sys -C "$rootfs" -cf "$out.tmp" .
if cmp -s "$out.tmp" "$out"; then rm "$out.tmp"; else mv "$out.tmp" "$out"; fi
