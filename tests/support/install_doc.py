"""docs/install.md's `helm install`, read as the values it sets: the cluster tier installs
with these plus only what its node needs (tests/cluster/conftest.py), and
tests/integration/test_install_doc.py renders it as written."""

from __future__ import annotations

import itertools
import json
import shlex
from typing import Any, Final

from tests.support.objects import ROOT

DOC: Final = ROOT / "docs" / "install.md"
MARK: Final = "<!-- install-doc: helm -->"


def documented_install(store_port: int = 5432) -> list[str]:
    """The marked block's `helm install` argv, ``$store_port`` as given."""
    text = DOC.read_text()
    block = text[text.index(MARK):].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = block.replace("\\\n", " ").splitlines()
    [install] = [shlex.split(c.replace('"$store_port"', str(store_port))) for c in commands
                 if c.strip().startswith("helm install")]
    return install


def values_of(argv: list[str]) -> dict[str, Any]:
    """The values its --set/--set-json flags set (Helm's forms the doc uses: dotted keys,
    booleans, integers, {a,b} lists, JSON)."""
    values: dict[str, Any] = {}
    for flag, assignment in itertools.pairwise(argv):
        if flag not in ("--set", "--set-json"):
            continue
        key, _, raw = assignment.partition("=")
        node = values
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = json.loads(raw) if flag == "--set-json" else _scalar(raw)
    return values


def _scalar(raw: str) -> Any:
    if raw in ("true", "false"):
        return raw == "true"
    if raw.isdigit():
        return int(raw)
    if raw.startswith("{") and raw.endswith("}"):
        return [item for item in raw[1:-1].split(",") if item]
    return raw


def secrets_named(argv: list[str]) -> dict[str, tuple[str, str]]:
    """What the documented install expects to exist: store and token Secrets (name, key)."""
    values = values_of(argv)
    return {"store": (values["store"]["dsnSecret"]["name"],
                      values["store"]["dsnSecret"].get("key", "dsn")),
            "token": (values["controlApi"]["tokenSecret"]["name"], "token")}

