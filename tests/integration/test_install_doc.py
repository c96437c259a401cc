"""docs/install.md's install works as written: every `helm install` in its marked block
renders with the chart (schema and template checks included), and its homeserver is the
examples' (a mismatch refuses every example MemoryScope with FEDERATION_DENIED)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from fgentic_devenv.binaries import binary
from tests.support.install_doc import documented_install, values_of
from tests.support.objects import ROOT

pytestmark = pytest.mark.integration

CHART = ROOT / "charts" / "fgentic-governance"


def _helm_installs() -> list[list[str]]:
    return [documented_install()]


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
