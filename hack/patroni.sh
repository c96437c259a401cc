#!/usr/bin/env bash
# Builds, idempotently, the venv with Patroni (PyPI, unmodified) that the HA store tier runs
# (fgentic_devenv/ha.py, tests/ha/): three Patroni members over the embedded PostgreSQL and the
# etcd the bootstrap builds (../shared/upstream/patroni-4.1.5/PATRONI.md). Debian's
# /usr/bin/python3, not the project's interpreter: Patroni starts PostgreSQL, so it runs as the
# non-root fgentic-pg user, who cannot execute an interpreter under root's home (pyenv).
# Keyed by the pins it installs (hack/lib/cached-venv.sh). Prints the venv path last.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/cached-venv.sh"
pins=("patroni[etcd3]==4.1.5" "psycopg2-binary==2.9.13")

venv_install() { "$1/bin/pip" install -q "${pins[@]}"; }
venv_check() { "$1/bin/python" -m patroni --version; }  # An install that cannot start.

cached_venv patroni "$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-16)" /usr/bin/python3 \
  "Patroni (about 30 s)"
