#!/usr/bin/env bash
# The test command: installs what is missing (once), builds the binaries the scenario tests
# start as processes, then runs every test of the workspace.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
cargo test --release --workspace "$@"
