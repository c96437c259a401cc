"""The container image built by hack/image.sh (docs/image.md): it is what the Containerfile and
the chart say (name, tag, user, entrypoint), it holds no installer, and every command of the
console script starts in it as user 65532 on a read-only root filesystem, under chroot and
under runc, a real OCI runtime.

The subcommands come from the CLI's own argparse parser, so a new one is covered without
touching this file."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tarfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from fgentic_governance.cli import _parser

# Runs the real build and the real image; like an integration test it never skips
# (tests/conftest.py turns a skip of an `integration` test into a failure).
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VENV = "/opt/fgentic-governance"
RunInImage = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]
ENTRYPOINT_SCRIPT = f"{VENV}/bin/fgentic-governance"
PYTHON = f"{VENV}/bin/python"


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
              ) -> Iterator[tuple[str, ...]]:
    """Every command path of the parser, the top level (``()``) first."""
    yield prefix
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias names the same parser again
                    seen.add(id(sub))
                    yield from _commands(sub, (*prefix, name))


COMMANDS = list(_commands(_parser()))


def _containerfile_final_stage() -> dict[str, str]:
    """The last ENTRYPOINT, USER and the VERSION argument's default in the Containerfile."""
    text = (ROOT / "Containerfile").read_text()
    found = {op: re.findall(rf"^{op}\s+(.+?)\s*$", text, re.MULTILINE)
             for op in ("ENTRYPOINT", "USER")}
    [version] = re.findall(r"^ARG\s+VERSION=(\S+)\s*$", text, re.MULTILINE)
    return {"ENTRYPOINT": found["ENTRYPOINT"][-1], "USER": found["USER"][-1], "VERSION": version}


def _chart() -> tuple[str, str]:
    """(image.repository from values.yaml, appVersion from Chart.yaml)."""
    chart_dir = ROOT / "charts/fgentic-governance"
    values = yaml.safe_load((chart_dir / "values.yaml").read_text())
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    return values["image"]["repository"], str(chart["appVersion"])


def test_the_subcommands_are_discovered() -> None:
    names = {command[0] for command in COMMANDS if command}
    assert {"operator", "webhook", "projector", "control-api", "render"} <= names
    assert ("render", "webhook-config") in COMMANDS


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "(top level)")
def test_every_command_prints_its_usage_in_the_image(
        run_in_image: RunInImage, command: tuple[str, ...]) -> None:
    result = run_in_image([ENTRYPOINT_SCRIPT, *command, "--help"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"usage: {' '.join(['fgentic-governance', *command])} ")
    assert not result.stderr  # no warning about unwritable bytecode, a missing module, ...


def test_the_shipped_servers_import_in_the_image(run_in_image: RunInImage) -> None:
    result = run_in_image([PYTHON, "-c", "import fgentic_governance.admission.server, "
                           "fgentic_governance.controller.main; print('ok')"])
    assert (result.returncode, result.stdout, result.stderr) == (0, "ok\n", "")


def test_every_module_of_ours_imports_in_the_image(run_in_image: RunInImage) -> None:
    """Nothing hack/image.sh prunes (e.g. the Kubernetes client's asyncio twin) is imported."""
    code = ("import importlib, pkgutil\n"
            "top = 'fgentic_governance'\n"
            "for m in pkgutil.walk_packages(importlib.import_module(top).__path__, top+'.'):\n"
            "    if not m.name.endswith('.__main__'):\n"
            "        importlib.import_module(m.name)\n"
            "        print(m.name)\n")
    result = run_in_image([PYTHON, "-c", code])
    assert result.returncode == 0, result.stderr
    modules = result.stdout.split()
    assert {"fgentic_governance.controller.main",
            "fgentic_governance.admission.server"} <= set(modules)
    assert len(modules) > 50


def test_the_image_holds_no_development_tool(run_in_image: RunInImage) -> None:
    """The dev package (devtools/fgentic_devenv: node, control plane, local PostgreSQL) and the
    test PostgreSQL are not in the product; neither is a `devenv` left inside our package."""
    code = ("import importlib.util, pathlib, fgentic_governance\n"
            "root = pathlib.Path(fgentic_governance.__file__).parent\n"
            "print([n for n in ('fgentic_devenv', 'pgserver', 'pytest', 'tests')\n"
            "       if importlib.util.find_spec(n)],\n"
            "      sorted(str(p.relative_to(root)) for p in root.rglob('*devenv*')))\n")
    result = run_in_image([PYTHON, "-c", code])
    assert (result.returncode, result.stdout, result.stderr) == (0, "[] []\n", "")


def test_it_runs_as_nonroot_with_a_read_only_root(run_in_image: RunInImage) -> None:
    code = ("import os, pwd\n"
            "print(os.getuid(), os.getgid(), pwd.getpwuid(os.getuid()).pw_name, os.getcwd())\n"
            "try:\n"
            "    open('/opt/fgentic-governance/probe', 'w')\n"
            "except OSError as e:\n"
            "    print(e.errno)\n")
    result = run_in_image([PYTHON, "-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["65532", "65532", "nonroot", "/", "30"]  # 30: EROFS


def test_the_config_is_the_containerfiles_and_the_charts(
        image_dir: Path, image_tag: str, image_manifest: dict[str, Any],
        image_config: dict[str, Any]) -> None:
    containerfile = _containerfile_final_stage()
    repository, app_version = _chart()
    assert image_config["User"] == containerfile["USER"] == "65532:65532"
    assert image_config["Entrypoint"] == json.loads(containerfile["ENTRYPOINT"]) == [
        ENTRYPOINT_SCRIPT]
    assert not image_config.get("Cmd")  # the chart passes args only
    assert image_config["WorkingDir"] == "/"
    assert f"PATH={VENV}/bin:" in " ".join(image_config["Env"])
    assert image_config["Labels"]["org.opencontainers.image.version"] == app_version
    assert image_manifest["annotations"]["org.opencontainers.image.version"] == app_version
    # The tag is the chart's appVersion, the name its image.repository.
    assert image_tag == app_version
    with tarfile.open(image_dir / "image.tar") as archive:
        member = archive.extractfile("manifest.json")
        assert member is not None
        [entry] = json.load(member)
    assert entry["RepoTags"] == [f"{repository}:{app_version}"]


def test_versions_agree() -> None:
    """The Containerfile's default VERSION (for `docker build`) is the chart's appVersion."""
    assert _containerfile_final_stage()["VERSION"] == _chart()[1]


def _site_packages(image_dir: Path) -> Path:
    return image_dir / "rootfs" / VENV.lstrip("/") / "lib/python3.11/site-packages"


def test_the_installed_distribution_is_the_charts_version(image_dir: Path) -> None:
    dists = sorted(p.name for p in _site_packages(image_dir).glob("fgentic_governance-*.dist-info"))
    assert dists == [f"fgentic_governance-{_chart()[1]}.dist-info"]


def test_no_installer_in_the_image(image_dir: Path) -> None:
    rootfs = image_dir / "rootfs"
    site = _site_packages(image_dir)
    leftovers = sorted(
        str(p.relative_to(rootfs))
        for pattern in ("pip", "pip-*", "setuptools", "setuptools-*", "pkg_resources",
                        "_distutils_hack", "distutils-precedence.pth")
        for p in site.glob(pattern))
    leftovers += sorted(str(p.relative_to(rootfs))
                        for p in (rootfs / VENV.lstrip("/") / "bin").glob("pip*"))
    leftovers += [str(p.relative_to(rootfs))
                  for p in (rootfs / "usr/share/python-wheels").glob("*")]
    assert not leftovers


def test_the_bytecode_is_compiled_ahead(image_dir: Path) -> None:
    """The root filesystem is read-only in the pod: a missing or stale .pyc would be
    recompiled on every start and never saved."""
    stale = []
    for source in (image_dir / "rootfs" / VENV.lstrip("/") / "lib").rglob("*.py"):
        cached = source.parent / "__pycache__" / f"{source.stem}.cpython-311.pyc"
        if not cached.is_file():
            stale.append(f"{source}: no {cached.name}")
            continue
        header = cached.read_bytes()[:16]
        st = source.stat()
        if int.from_bytes(header[4:8], "little") == 0 and (  # timestamp-based
                int.from_bytes(header[8:12], "little") != int(st.st_mtime) & 0xFFFFFFFF
                or int.from_bytes(header[12:16], "little") != st.st_size & 0xFFFFFFFF):
            stale.append(f"{source}: stale {cached.name}")
    assert not stale, "\n".join(stale[:20])


def test_the_user_is_in_passwd_and_group(image_dir: Path) -> None:
    passwd = (image_dir / "rootfs/etc/passwd").read_text().splitlines()
    group = (image_dir / "rootfs/etc/group").read_text().splitlines()
    assert [line for line in passwd if line.startswith("nonroot:")] == [
        "nonroot:x:65532:65532::/home/nonroot:/usr/sbin/nologin"]
    assert [line for line in group if line.startswith("nonroot:")] == ["nonroot:x:65532:"]


def test_it_runs_under_runc_as_its_config_says(
        image_dir: Path, image_tag: str, tmp_path: Path) -> None:
    """umoci unpacks the OCI image into a runtime bundle (config.json from the image config);
    runc runs it with a read-only root, as readOnlyRootFilesystem does in the chart."""
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{image_dir / 'oci'}:{image_tag}", str(bundle)],
                   check=True, capture_output=True)
    spec = json.loads((bundle / "config.json").read_text())
    assert spec["process"]["args"] == [ENTRYPOINT_SCRIPT]
    assert spec["process"]["user"]["uid"] == spec["process"]["user"]["gid"] == 65532
    spec["process"]["args"] = [ENTRYPOINT_SCRIPT, "--help"]
    spec["process"]["terminal"] = False
    spec["root"]["readonly"] = True
    (bundle / "config.json").write_text(json.dumps(spec))
    name = f"fgentic-image-test-{uuid.uuid4().hex[:8]}"
    try:
        result = subprocess.run(["runc", "run", "--bundle", str(bundle), name],
                                capture_output=True, text=True, timeout=120, check=False,
                                stdin=subprocess.DEVNULL)
    finally:
        subprocess.run(["runc", "delete", "--force", name], capture_output=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("usage: fgentic-governance ")


def test_nothing_of_the_build_host_is_in_the_image(image_dir: Path) -> None:
    """mmdebstrap copies the host's resolv.conf and hostname in; the runtime mounts its own."""
    rootfs = image_dir / "rootfs"
    assert (rootfs / "etc/resolv.conf").read_text() == ""
    assert (rootfs / "etc/hostname").read_text() == ""
    assert not list((rootfs / "dev").iterdir())
    assert not list((rootfs / "tmp").iterdir())
    assert not list((rootfs / "var/lib/apt/lists").glob("*"))
