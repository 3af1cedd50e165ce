#!/usr/bin/env bash
# Installs one peer into its own virtualenv target/peers/NAME from PyPI (sourced by bench/peers.sh).
#   install_peer NAME IMPORT_CHECK PIP_SPEC...
# Records the outcome in target/peers/NAME.status: "ok <seconds>" or "failed" with pip's last
# lines (the reason the table gives), and skips itself when the check already passes.
peers_dir="${PEERS_DIR:-target/peers}"
install_peer() {
  local name="$1" check="$2"; shift 2
  local venv="$peers_dir/$name" status="$peers_dir/$name.status"
  mkdir -p "$peers_dir"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    [ -f "$status" ] || echo "ok (already installed)" >"$status"
    return 0
  fi
  local start; start=$(date +%s)
  python3.11 -m venv "$venv"
  if "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" \
      >"$venv.pip.log" 2>&1 && "$venv/bin/python" -c "$check" >>"$venv.pip.log" 2>&1; then
    echo "ok $(( $(date +%s) - start )) s: $*" >"$status"
    return 0
  fi
  { echo "failed after $(( $(date +%s) - start )) s: pip install $*"; tail -n 15 "$venv.pip.log"; } >"$status"
  return 1
}
