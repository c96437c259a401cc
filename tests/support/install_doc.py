"""docs/install.md as the tests read it: its prerequisites block as commands, its `helm
install` and its single-node flags as the values they set. The cluster tier runs the
prerequisites and installs with these values plus only its own test fixtures
(tests/cluster/conftest.py); tests/integration/test_install_doc.py renders the install as
written and runs the prerequisites on a bare API server."""

from __future__ import annotations

import itertools
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from tests.support.objects import ROOT

DOC: Final = ROOT / "docs" / "install.md"
MARK: Final = "<!-- install-doc: helm -->"
PREREQUISITES: Final = "<!-- install-doc: prerequisites -->"
UPSTREAM: Final = "../shared/upstream/"
"""How the page names the pinned upstream tree (beside the repository)."""


def _block(mark: str) -> list[str]:
    """The commands of the ```sh block after ``mark``, continuation lines joined."""
    text = DOC.read_text()
    block = text[text.index(mark):].split("```sh\n", 1)[1].split("```", 1)[0]
    return block.replace("\\\n", " ").splitlines()


def documented_prerequisites(upstream: Path) -> list[list[str]]:
    """The prerequisites block's commands as argv (comments and blank lines dropped), the
    pinned upstream tree resolved to ``upstream``."""
    commands = [shlex.split(line, comments=True) for line in _block(PREREQUISITES)]
    return [[str(upstream / arg[len(UPSTREAM):]) if arg.startswith(UPSTREAM) else arg
             for arg in argv] for argv in commands if argv]


def apply_prerequisites(kubectl: Callable[..., str], upstream: Path) -> list[list[str]]:
    """Run the prerequisites block as written with ``kubectl`` (a control plane's or a
    node's); every command of the block must be a kubectl one. Returns what it ran."""
    commands = documented_prerequisites(upstream)
    for argv in commands:
        assert argv[0] == "kubectl", argv
        kubectl(*argv[1:], timeout=150)
    return commands


def documented_install(store_port: int = 5432) -> list[str]:
    """The marked block's `helm install` argv, ``$store_port`` as given."""
    commands = _block(MARK)
    [install] = [shlex.split(c.replace('"$store_port"', str(store_port))) for c in commands
                 if c.strip().startswith("helm install")]
    return install


NODE: Final = "<!-- install-doc: node -->"


def documented_node_flags() -> list[str]:
    """The single-node section's flags appended to the install (``node_flags=( ... )``)."""
    tokens = shlex.split(" ".join(_block(NODE)), comments=True)
    assert tokens[0] == "node_flags=(" and tokens[-1] == ")", tokens
    return tokens[1:-1]


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

