#!/usr/bin/env bash
# Builds, idempotently, the venv with Patroni (PyPI, unmodified) that the HA store tier runs
# (fgentic_devenv/ha.py, tests/ha/): three Patroni members over the embedded PostgreSQL and the
# etcd the bootstrap builds (../shared/upstream/patroni-4.1.5/PATRONI.md). Debian's
# /usr/bin/python3, not the project's interpreter: Patroni starts PostgreSQL, so it runs as the
# non-root fgentic-pg user, who cannot execute an interpreter under root's home (pyenv).
# Keyed by the pins it installs, so a changed pin builds a new venv; built in place, marked
# .complete last, so a half-built venv is removed and rebuilt. Prints the venv path last.
set -euo pipefail
pins=("patroni[etcd3]==4.1.5" "psycopg2-binary==2.9.13")
key="$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-16)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/fgentic-governance/patroni"
venv="$cache/$key"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock -w 900 9 || { echo "timed out waiting for another build ($cache/.lock)" >&2; exit 1; }

if [[ ! -f $venv/.complete ]]; then
  echo "== Patroni venv at $venv (about 30 s)" >&2
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q "${pins[@]}" >&2
  # An install that cannot start must not be marked complete.
  "$venv/bin/python" -m patroni --version >&2
  touch "$venv/.complete"
fi
echo "$venv"
