#!/usr/bin/env bash
# Checks the Kubernetes manifests: renders every overlay with kustomize (`kubectl kustomize`,
# or a standalone `kustomize`), validates every object against the Kubernetes API schemas in
# strict mode (kubernetes-validate from PyPI, installed into target/deploy-tools on first use),
# and checks what the deployment relies on (deploy/k8s/check.py). Extra arguments are more
# kustomization directories to check (the tests pass broken ones to see it fail).
#
# usage: deploy/k8s/validate.sh [--k8s-version 1.30.0] [KUSTOMIZATION_DIR...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="1.30.0"
dirs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --k8s-version) version="$2"; shift 2 ;;
    *) dirs+=("$1"); shift ;;
  esac
done
[[ ${#dirs[@]} -gt 0 ]] || dirs=("$here/overlays/cpu" "$here/overlays/gpu" "$here/overlays/cpu-tls" \
  "$here/overlays/cpu-ranks" "$here/overlays/gpu-ranks")

if command -v kustomize >/dev/null; then
  render=(kustomize build)
elif command -v kubectl >/dev/null; then
  render=(kubectl kustomize)
else
  echo "validate.sh: neither kustomize nor kubectl is installed" >&2
  exit 3
fi

source "$repo/deploy/tools.sh"
tools="$(deploy_tool kubernetes-validate "python3 -c 'import kubernetes_validate, yaml'")"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for dir in "${dirs[@]}"; do
  name="$(basename "$dir")"
  "${render[@]}" "$dir" >"$out/$name.yaml"
  echo "[validate] $dir: rendered with ${render[*]}"
  PYTHONPATH="$tools" python3 "$here/check.py" --k8s-version "$version" "$out/$name.yaml"
done
# The optional autoscaler component, on its own.
PYTHONPATH="$tools" python3 "$here/check.py" --k8s-version "$version" --schema-only \
  "$here/components/actor-hpa/hpa.yaml"
