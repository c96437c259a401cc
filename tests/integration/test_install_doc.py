"""docs/install.md's install works as written: every `helm install` in its marked block
renders with the chart (schema and template checks included), and its homeserver is the
examples' (a mismatch refuses every example MemoryScope with FEDERATION_DENIED)."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
import yaml

from fgentic_devenv.binaries import binary
from tests.support.objects import ROOT

pytestmark = pytest.mark.integration

DOC = ROOT / "docs" / "install.md"
CHART = ROOT / "charts" / "fgentic-governance"
MARK = "<!-- install-doc: helm -->"


def _helm_installs() -> list[list[str]]:
    text = DOC.read_text()
    block = text[text.index(MARK):].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = block.replace("\\\n", " ").splitlines()
    installs = [shlex.split(c.replace('"$store_port"', "5432")) for c in commands
                if c.strip().startswith("helm install")]
    assert installs, "no helm install in the marked block"
    return installs


def _flag(argv: list[str], name: str) -> str:
    for i, arg in enumerate(argv):
        if arg == "--set" and argv[i + 1].startswith(name + "="):
            return argv[i + 1].split("=", 1)[1]
    raise AssertionError(f"{name} not set")


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
