#!/usr/bin/env bash
# The main job on the embedded default: local control plane + PostgreSQL + operator + webhook,
# the demo profile from examples/, and each object's content-free status.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
hack/bootstrap.sh
exec .venv/bin/fgentic-governance dev up --workdir "$root/.run" "$@"
