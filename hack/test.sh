#!/usr/bin/env bash
# The one command that runs every check and test: lint, types, layer contracts, CRD drift,
# then pytest
# (unit, integration against a real kube-apiserver + etcd and a real PostgreSQL, e2e).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
hack/bootstrap.sh
export PATH="$root/.venv/bin:$PATH"

echo "== ruff";  ruff check src devtools tests benchmarks
echo "== mypy";  mypy
echo "== layers"; lint-imports
echo "== crds";  fgentic-governance crds --check
echo "== pytest"
# pytest exits 5 when it collects nothing; under `set -e` that fails the run, as it must.
python -m pytest "$@"
