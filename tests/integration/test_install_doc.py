"""docs/install.md's install works as written: every `helm install` in its marked block
renders with the chart (schema and template checks included), also with the single-node
section's flags, and its homeserver is the examples' (a mismatch refuses every example
MemoryScope with FEDERATION_DENIED); its prerequisites install every kind the renderer and the
webhook need, server-side (test_retrievalbinding_missing_kinds.py runs them on a bare API
server, the cluster tier on its node)."""

from __future__ import annotations

import ipaddress
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from fgentic_devenv.binaries import binary, upstream_dir
from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_devenv.node import BRIDGE_ADDRESS, SERVICE_CIDR
from fgentic_governance.retrieval.render.names import RENDERED_KINDS
from tests.support.install_doc import (
    documented_install,
    documented_node_flags,
    documented_prerequisites,
    values_of,
)
from tests.support.objects import ROOT

pytestmark = pytest.mark.integration

CHART = ROOT / "charts" / "fgentic-governance"


def _helm_installs() -> list[list[str]]:
    # As written, and as the single-node section runs it (its flags appended).
    return [documented_install(), [*documented_install(), *documented_node_flags()]]


def _flag(argv: list[str], name: str) -> str:
    value = values_of(argv)
    for part in name.split("."):
        value = value[part]
    assert isinstance(value, str)
    return value


@pytest.mark.parametrize("argv", _helm_installs())
def test_the_documented_install_renders(argv: list[str]) -> None:
    release, chart, rest = argv[2], argv[3], argv[4:]
    assert (ROOT / chart).resolve() == CHART
    rest = [a for a in rest if a != "--wait"]
    done = subprocess.run([str(binary("helm")), "template", release, str(CHART), *rest],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(done.stdout) if d}
    assert {"Deployment", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
            "NetworkPolicy"} <= kinds


def test_the_documented_homeserver_is_the_examples() -> None:
    servers = set(re.findall(r'mxid: "@[^:"]+:([^"]+)"', "\n".join(
        p.read_text() for p in sorted((ROOT / "examples").glob("*.yaml")))))
    assert len(servers) == 1, servers
    for argv in _helm_installs():
        assert _flag(argv, "localHomeserver") in servers
        assert _flag(argv, "controlApi.botMxid").endswith(":" + _flag(argv, "localHomeserver"))


def _applied_kinds() -> set[tuple[str, str]]:
    """(group, kind) of every CRD the prerequisites block applies."""
    kinds = set()
    for argv in documented_prerequisites(upstream_dir()):
        if argv[1] != "apply":
            continue
        assert "--server-side" in argv, argv  # client-side is refused (test below)
        for path in [argv[i + 1] for i, a in enumerate(argv) if a == "-f"]:
            for crd in sorted(Path(path).glob("*.yaml")):
                spec = yaml.safe_load(crd.read_text())["spec"]
                kinds.add((spec["group"], spec["names"]["kind"]))
    return kinds


def test_the_prerequisites_install_every_kind_we_render_and_review() -> None:
    needed = {(api_version.rpartition("/")[0], kind) for api_version, kind in RENDERED_KINDS
              if api_version.rpartition("/")[0] not in ("", "networking.k8s.io")}
    needed |= {("kagent.dev", "Agent"), ("kagent.dev", "ModelConfig"),
               ("kagent.dev", "RemoteMCPServer")}
    assert needed <= _applied_kinds()


def test_client_side_apply_of_kagents_crds_is_refused_as_the_page_says(
        control_plane: LocalControlPlane) -> None:
    """Why the page says --server-side: the last-applied annotation of kagent's Agent CRD is
    over the API server's limit (a server-side dry run: nothing changes)."""
    agents = upstream_dir() / "kagent-v0.9.11" / "crds" / "kagent.dev_agents.yaml"
    done = subprocess.run([str(binary("kubectl")), "--kubeconfig", str(control_plane.kubeconfig),
                           "apply", "--dry-run=server", "-f", str(agents)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "metadata.annotations: Too long" in done.stderr, done.stderr


def test_the_single_node_flags_are_the_nodes_addresses() -> None:
    values = values_of(documented_node_flags())
    assert values["webhook"]["networkPolicy"]["apiServerSources"] == [
        {"ipBlock": {"cidr": f"{BRIDGE_ADDRESS}/32"}}]
    service_ip = ipaddress.ip_address(values["memoryApi"]["service"]["clusterIP"])
    assert service_ip in ipaddress.ip_network(SERVICE_CIDR)
    assert values["memoryApi"]["url"] == f"http://{service_ip}:8083"
