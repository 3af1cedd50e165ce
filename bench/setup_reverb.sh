#!/usr/bin/env bash
# Installs DeepMind Reverb for the replay benchmark (bench/reverb_replay.py), once, into its own
# virtualenv bench/.venv-reverb: dm-reverb 0.14.0 (its last release) with TensorFlow 2.15.1, the
# TF line that release was built against (its wheels load TF's shared libraries; other TF
# versions fail at import). Python 3.9-3.11 only: dm-reverb ships no wheel for newer Pythons.
# Safe to run again: skips itself when both import at the pinned versions.
#   bash bench/setup_reverb.sh          # prints the venv's python on stdout
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv-reverb"
REVERB_VERSION="0.14.0"
TF_VERSION="2.15.1"
log() { printf '[setup_reverb] %s\n' "$*" >&2; }

check() {
  "$venv/bin/python" - "$REVERB_VERSION" "$TF_VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata as m, sys
assert m.version("dm-reverb") == sys.argv[1], "dm-reverb"
assert m.version("tensorflow") == sys.argv[2], "tensorflow"
import reverb  # noqa: F401  (loads TF and Reverb's native library)
PY
}

if [ -x "$venv/bin/python" ] && check; then
  log "dm-reverb $REVERB_VERSION + tensorflow $TF_VERSION already installed in $venv"
  echo "$venv/bin/python"
  exit 0
fi

python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3.10 python3.9 python3; do
    if "$candidate" -c 'import sys, venv; assert (3, 9) <= sys.version_info[:2] <= (3, 11)' \
        >/dev/null 2>&1; then
      python_bin="$candidate"; break
    fi
  done
fi
if [ -z "$python_bin" ]; then
  log "error: dm-reverb $REVERB_VERSION needs Python 3.9-3.11; none found (set PYTHON=...)"
  exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
  log "creating virtualenv $venv with $python_bin"
  "$python_bin" -m venv "$venv"
fi

log "installing dm-reverb==$REVERB_VERSION tensorflow==$TF_VERSION from PyPI" \
  "(1.7 GB on disk; 30-80 s on a 2-core machine)"
start=$(date +%s)
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "dm-reverb==$REVERB_VERSION" "tensorflow==$TF_VERSION" >&2
check || { log "error: installed, but 'import reverb' fails in $venv"; exit 1; }
log "installed in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1) in $venv"
echo "$venv/bin/python"
