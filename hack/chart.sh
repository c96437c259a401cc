#!/usr/bin/env bash
# Packages the chart (helm lint, the generated values schema and admission policies checked)
# and, given an OCI repository, pushes it there:
#   hack/chart.sh                                   # package only
#   hack/chart.sh oci://registry.example.org/charts # package and push (helm registry login first)
# The package goes to ${FGENTIC_CHART_DIR:-~/.cache/fgentic-governance/chart}; its path is the
# last line of stdout. Its image is image.repository:appVersion (docs/image.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[[ -x .venv/bin/python ]] || hack/bootstrap.sh >&2
helm="$(hack/build-controlplane.sh helm | tail -1)/helm"
out="${FGENTIC_CHART_DIR:-$HOME/.cache/fgentic-governance/chart}"
mkdir -p "$out"
.venv/bin/fgentic-dev chart-schema --check >&2
.venv/bin/fgentic-dev chart-policy --check >&2
.venv/bin/fgentic-governance crds --check >&2
"$helm" lint charts/fgentic-governance >&2
package=$("$helm" package charts/fgentic-governance --destination "$out" | awk '{print $NF}')
if [[ -n "${1:-}" ]]; then
  [[ "$1" == oci://* ]] || { echo "hack/chart.sh: the repository must be oci://…" >&2; exit 2; }
  "$helm" push "$package" "$1" >&2
fi
echo "$package"
