#!/usr/bin/env bash
# Builds, idempotently, the venv with the real kagent Python runtime (unmodified) that
# tests/support/kagent.py runs: kagent-adk 0.9.11 (the ADRs' pin, the default) or, given
# VERSION=0.10.4 as $1, the release users run now. A venv of its own per version: google-adk
# caps mcp<2 and kagent-adk does not resolve without pins (0.9.11: upstream's lock,
# ../shared/upstream/kagent-v0.9.11/runtime/RUNTIME.md; 0.10.4: hack/kagent-runtime/, no
# upstream lock exists). Keyed by the constraints it installs (one file per version, so one
# venv per version; hack/lib/cached-venv.sh). Prints the venv path as its last line.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/cached-venv.sh"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${1:-0.9.11}"
case "$version" in
  0.9.11) constraints="$root/../shared/upstream/kagent-v0.9.11/runtime/constraints.txt" ;;
  0.10.4) constraints="$root/hack/kagent-runtime/constraints-0.10.4.txt" ;;
  *) echo "unknown kagent runtime version $version" >&2; exit 2 ;;
esac
[[ -f $constraints ]] || { echo "missing $constraints" >&2; exit 1; }

venv_install() {
  "$1/bin/pip" install -q -c "$constraints" \
    "kagent-adk==$version" "kagent-core==$version" "kagent-skills==$version" \
    "agentsts-adk==$version" "agentsts-core==$version" \
    opentelemetry-instrumentation-fastapi==0.59b0 opentelemetry-instrumentation-httpx==0.59b0
}
# A resolve that installs but cannot import (e.g. a2a-sdk 1.x) must not be marked complete.
venv_check() { LOG_LEVEL=ERROR "$1/bin/python" -W ignore -c "import kagent.adk.cli"; }

cached_venv kagent-runtime "$(sha256sum "$constraints" | cut -c1-16)" python3.11 \
  "kagent runtime $version (about 80 s)"
