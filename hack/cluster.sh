#!/usr/bin/env bash
# A real single-node cluster on this machine (root): the tests' node, by hand.
#   hack/cluster.sh up [WORKDIR]      start it in the foreground (Ctrl-C tears it down)
#   hack/cluster.sh down [WORKDIR]    remove everything a node left behind (after a crash too)
#   hack/cluster.sh check [WORKDIR]   list what is left behind, exit 1 if anything is
#   hack/cluster.sh store [WORKDIR]   on a running node: the install page's store (PostgreSQL +
#                                     pgvector on the bridge address), foreground; its DSN for
#                                     pods in WORKDIR/dsn (WORKDIR defaults to /tmp/fgentic-store)
# WORKDIR defaults to /tmp/fgentic-node. See docs/cluster-tier.md and
# devtools/fgentic_devenv/node.py.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
action="${1:?usage: hack/cluster.sh up|down|check|store [WORKDIR]}"
default=/tmp/fgentic-node
[[ $action == store ]] && default=/tmp/fgentic-store
workdir="${2:-$default}"
[[ -x "$root/.venv/bin/python" ]] || "$root/hack/bootstrap.sh"
exec "$root/.venv/bin/python" -m fgentic_devenv.node "$action" "$workdir"
