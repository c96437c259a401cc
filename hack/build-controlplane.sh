#!/usr/bin/env bash
# Builds the local control-plane binaries (kube-apiserver, kubectl, etcd, helm), promtool (for
# the alert-rule tests) and, for the cluster tier, the node components (kubelet,
# kube-controller-manager, kube-scheduler, kube-proxy), the NetworkPolicy enforcer
# (kube-router) and the pause binary, from the committed wrapper modules under
# tools/controlplane/, and caches them outside the repo, keyed by version, so a second run
# costs nothing.
set -euo pipefail

KUBE_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
HELM_VERSION=v4.3.2
# Test-time NetworkPolicy enforcer only (docs/cluster-tier.md): the only version the module
# proxy serves; never shipped.
KUBE_ROUTER_VERSION=v2.1.0
# promtool, for the alert-rule tests only (real rule evaluation; never shipped). The Go
# module github.com/prometheus/prometheus v0.316.0 is Prometheus 3.16.0.
PROMETHEUS_VERSION=v3.16.0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${FGENTIC_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fgentic-governance/bin}"
mkdir -p "$cache"
export CGO_ENABLED=0 GOFLAGS=-mod=mod

build() { # build <module dir> <package> <output> [ldflags] [build tags]
  local dir="$1" pkg="$2" out="$3" ldflags="${4:-}" tags="${5:-selinux,notest}"
  if [[ -x "$out" ]]; then return 0; fi
  echo "building $(basename "$out") (cached at $out afterwards)" >&2
  (cd "$root/tools/controlplane/$dir" &&
    go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
  mv "$out.tmp" "$out"
}

kube_ld="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
kube_ld+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"
kube_ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
kube_ld+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=36"

which="${1:-all}"
if [[ "$which" == all || "$which" == etcd ]]; then
  build etcd go.etcd.io/etcd/server/v3 "$cache/etcd-$ETCD_VERSION"
fi
if [[ "$which" == all || "$which" == kubernetes ]]; then
  build kubernetes k8s.io/kubernetes/cmd/kube-apiserver "$cache/kube-apiserver-$KUBE_VERSION" "$kube_ld"
  build kubernetes k8s.io/kubernetes/cmd/kubectl "$cache/kubectl-$KUBE_VERSION" "$kube_ld"
fi
if [[ "$which" == all || "$which" == helm ]]; then
  build helm helm.sh/helm/v4/cmd/helm "$cache/helm-$HELM_VERSION" \
    "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
fi

if [[ "$which" == all || "$which" == prometheus ]]; then
  # remove_all_sd: without the cloud service-discovery plugins (every cloud SDK), which rule
  # evaluation never uses; they would take most of the build.
  build prometheus github.com/prometheus/prometheus/cmd/promtool "$cache/promtool-$PROMETHEUS_VERSION" \
    "-X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}" remove_all_sd
fi

if [[ "$which" == all || "$which" == node ]]; then
  for cmd in kubelet kube-controller-manager kube-scheduler kube-proxy; do
    build node "k8s.io/kubernetes/cmd/$cmd" "$cache/$cmd-$KUBE_VERSION" "$kube_ld"
  done
  out="$cache/kube-router-$KUBE_ROUTER_VERSION"
  if [[ ! -x "$out" ]]; then
    echo "building kube-router (cached at $out afterwards)" >&2
    gobin="$(mktemp -d)"
    GOBIN="$gobin" go install -trimpath -ldflags "-s -w" \
      "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
    mv "$gobin/kube-router" "$out" && rmdir "$gobin"
  fi
  # The sandbox image's process, from the pinned kubernetes module's own source.
  out="$cache/pause-$KUBE_VERSION"
  if [[ ! -x "$out" ]]; then
    src="$(cd "$root/tools/controlplane/node" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
    gcc -Os -static -DVERSION="$KUBE_VERSION" -o "$out.tmp" "$src/build/pause/linux/pause.c"
    strip "$out.tmp" && mv "$out.tmp" "$out"
  fi
  for cmd in kubelet kube-controller-manager kube-scheduler kube-proxy pause; do
    ln -sf "$cmd-$KUBE_VERSION" "$cache/$cmd"
  done
  ln -sf "kube-router-$KUBE_ROUTER_VERSION" "$cache/kube-router"
fi

# Stable names for scripts and tests.
ln -sf "etcd-$ETCD_VERSION" "$cache/etcd"
ln -sf "kube-apiserver-$KUBE_VERSION" "$cache/kube-apiserver"
ln -sf "kubectl-$KUBE_VERSION" "$cache/kubectl"
ln -sf "helm-$HELM_VERSION" "$cache/helm"
ln -sf "promtool-$PROMETHEUS_VERSION" "$cache/promtool"
echo "$cache"
