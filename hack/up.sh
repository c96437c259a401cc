#!/usr/bin/env bash
# The main job on the embedded default: local control plane + PostgreSQL + operator + webhook +
# memory API, the demo profile from examples/, each object's content-free status, and a
# governed save next to a refused unconsented one through the memory API.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# `hack/up.sh down` stops what a run killed outright left; Ctrl-C, SIGTERM or SIGHUP of a
# running one stops all of it.
if [[ "${1:-}" == down ]]; then
  shift
  if [[ ! -x .venv/bin/fgentic-dev ]]; then
    echo "nothing to stop: hack/up.sh has not run in $root"
    exit 0
  fi
  exec .venv/bin/fgentic-dev down --workdir "$root/.run" "$@"
fi
hack/bootstrap.sh
exec .venv/bin/fgentic-dev up --workdir "$root/.run" "$@"
