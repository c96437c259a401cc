#!/usr/bin/env bash
# A real single-node cluster on this machine (root): the tests' node, by hand.
#   hack/cluster.sh up [WORKDIR]      start it in the foreground (Ctrl-C tears it down)
#   hack/cluster.sh down [WORKDIR]    remove everything a node left behind (after a crash too)
#   hack/cluster.sh check [WORKDIR]   list what is left behind, exit 1 if anything is
# WORKDIR defaults to /tmp/fgentic-node. See docs/cluster-tier.md and
# devtools/fgentic_devenv/node.py.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
action="${1:?usage: hack/cluster.sh up|down|check [WORKDIR]}"
workdir="${2:-/tmp/fgentic-node}"
[[ -x "$root/.venv/bin/python" ]] || "$root/hack/bootstrap.sh"
exec "$root/.venv/bin/python" -m fgentic_devenv.node "$action" "$workdir"
