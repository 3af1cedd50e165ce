#!/usr/bin/env bash
# The test command: installs what is missing (once), builds the binaries the scenario tests
# start as processes, checks formatting and lints, then runs every test of the workspace.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
for tool in fmt clippy; do
  cargo "$tool" --version >/dev/null 2>&1 ||
    { echo "error: cargo $tool is missing; install it with: rustup component add rustfmt clippy" >&2; exit 1; }
done
echo "[test] cargo fmt --check" >&2
cargo fmt --all --check
echo "[test] cargo clippy (warnings are errors)" >&2
cargo clippy --release --workspace --all-targets --quiet -- -D warnings
# --tests: every lib, bin and integration test, without building the examples (benchmarks,
# which clippy above already checks; building them took a minute of CPU) or the doc tests
# (every code block in the docs is text or `ignore`).
cargo test --release --workspace --tests "$@"
