#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine, idempotently:
# Debian packages, the control-plane binaries (cached outside the repo, keyed by version),
# and a virtualenv at .venv with the package and its dev extras.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# Each step says what it builds and, when it ends, how long it took (a cold machine spends
# most of its time in the control-plane build and the kagent runtime's venv).
started=$SECONDS
step_start=$SECONDS
step() {
  if [[ -n "${step_name:-}" ]]; then
    echo "   done: $step_name in $((SECONDS - step_start)) s"
  fi
  step_name="$1"; step_start=$SECONDS
  echo "== $1"
}

need_apt=()
command -v go >/dev/null || need_apt+=(golang-go)
command -v useradd >/dev/null || need_apt+=(passwd)
python3 -c "import venv, ensurepip" 2>/dev/null || need_apt+=(python3-venv)
# The image build (hack/image.sh) and the cluster tier's node (fgentic_devenv/node.py, NODE.md):
# containerd/runc/CNI plugins, the cluster DNS, and the tools kube-proxy and kube-router drive.
for pair in mmdebstrap:mmdebstrap umoci:umoci skopeo:skopeo containerd:containerd runc:runc \
    dnsmasq:dnsmasq-base iptables:iptables ipset:ipset nft:nftables conntrack:conntrack \
    ip:iproute2 unshare:util-linux; do
  command -v "${pair%%:*}" >/dev/null || need_apt+=("${pair#*:}")
done
[[ -x /usr/lib/cni/bridge ]] || need_apt+=(containernetworking-plugins)
# The portable pgvector build (fgentic_devenv/pgvector.py) and its instruction check (fgentic_devenv/isa.py).
for pair in make:make gcc:gcc objdump:binutils; do
  command -v "${pair%%:*}" >/dev/null || need_apt+=("${pair#*:}")
done
[[ -f /usr/include/locale.h ]] || need_apt+=(libc6-dev)
step "Debian packages (${#need_apt[@]} missing)"
if ((${#need_apt[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
  else
    echo "missing packages: ${need_apt[*]} (install them as root)" >&2; exit 1
  fi
fi

step "control-plane and node binaries (Kubernetes v1.36.3, etcd v3.6.8, helm v4.3.2, kube-router v2.1.0, promtool v3.16.0; cached)"
hack/build-controlplane.sh all

step "python environment (.venv: the package and devtools, editable)"
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
stamp=".venv/.installed-$(cat pyproject.toml devtools/pyproject.toml | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # setuptools' editable installs warn about a deprecated mechanism on every run; the
  # warning says nothing about this repository.
  # A failure still shows everything pip said.
  pip_log=$(mktemp)
  if ! PYTHONWARNINGS="ignore::DeprecationWarning,ignore::UserWarning" \
      .venv/bin/python -m pip install -q -e ".[dev]" -e ./devtools >"$pip_log" 2>&1; then
    cat "$pip_log" >&2; rm -f "$pip_log"; exit 1
  fi
  grep -v -i -E "setuptools|editable|^\s*$|^!!|^\*+$" "$pip_log" || true
  rm -f "$pip_log"
  rm -f .venv/.installed-* && touch "$stamp"
fi

step "pgvector 0.8.6, portable build (cached), and the embedded PostgreSQL's self-test"
.venv/bin/fgentic-dev pgvector --self-test

step "the real kagent runtime (kagent-adk 0.9.11, its own cached venv)"
hack/kagent-runtime.sh >/dev/null
step "the kagent release users run now (kagent-adk 0.10.4, its own cached venv)"
hack/kagent-runtime.sh 0.10.4 >/dev/null
step "Patroni 4.1.5 for the HA store tier (tests/ha; its own cached venv)"
hack/patroni.sh >/dev/null
step "ready"
echo "   bootstrap took $((SECONDS - started)) s"
