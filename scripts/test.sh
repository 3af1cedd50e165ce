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
if [ $# -gt 0 ]; then
  cargo test --release --workspace --tests "$@"
  exit
fi
# The whole suite. Its longest test, sparse PEARL (tests/tests/sparse_pearl.rs: one learner
# busy for about 340 s, whatever else runs), starts first, on its own, at the lowest priority,
# and the rest runs beside it: cargo runs test binaries one at a time, and PEARL alone after
# the scenarios left a core idle wherever those wait on processes and sockets. At nice 19 it
# takes only the CPU the others leave (at the same priority, beside the scenarios, it once
# starved their actors); its rate limiter keeps its updates per env step whatever its speed.
cargo test --release --workspace --tests --no-run
pearl_test=pearl_finds_sparse_goals_from_its_context
pearl_bin="$(cargo test --release --workspace --tests --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "sparse_pearl" and m.get("executable"):
        print(m["executable"])')"
[ -x "$pearl_bin" ] || { echo "error: no sparse_pearl test binary was built" >&2; exit 1; }
pearl_log="$(mktemp)"
echo "[test] $pearl_test at nice 19 beside the rest (its output follows theirs)" >&2
(cd tests && exec nice -n 19 "$pearl_bin" "$pearl_test" --exact) >"$pearl_log" 2>&1 &
pearl_pid=$!
trap 'kill "$pearl_pid" 2>/dev/null || true' EXIT
rest=0
cargo test --release --workspace --tests -- --skip "$pearl_test" || rest=$?
pearl=0
wait "$pearl_pid" || pearl=$?
trap - EXIT
echo "[test] $pearl_test (tests/tests/sparse_pearl.rs, run beside the rest):" >&2
cat "$pearl_log"
[ "$pearl" = 0 ] || echo "error: $pearl_test failed (exit $pearl)" >&2
[ "$rest" = 0 ] && [ "$pearl" = 0 ]
