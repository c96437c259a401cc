#!/usr/bin/env bash
# The main job on the embedded default: local control plane + PostgreSQL + operator + webhook +
# memory API, the demo profile from examples/, each object's content-free status, and a
# governed save next to a refused unconsented one through the memory API.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
hack/bootstrap.sh
exec .venv/bin/fgentic-dev up --workdir "$root/.run" "$@"
