# Sourced by the deploy scripts: `deploy_tool PACKAGE CHECK` installs a PyPI package into its
# own pip --target directory, target/deploy-tools/PACKAGE (never the project's .venv), unless
# CHECK already succeeds with that directory on PYTHONPATH and its bin/ on PATH; then prints
# the directory. A lock keeps concurrent callers (parallel tests) from installing at once.
deploy_tools="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/deploy-tools"

deploy_tool() {
  local package="$1" check="$2" dir="$deploy_tools/$1"
  mkdir -p "$deploy_tools"
  (
    flock 9
    if ! PYTHONPATH="$dir" PATH="$dir/bin:$PATH" bash -c "$check" >/dev/null 2>&1; then
      echo "[deploy] installing $package (PyPI) into $dir" >&2
      rm -rf "$dir"
      python3 -m pip install --quiet --disable-pip-version-check --target "$dir" "$package" >&2
    fi
  ) 9>"$deploy_tools/.lock"
  echo "$dir"
}
