"""How every subcommand ends when it cannot go on: one line on stderr, never a traceback.

``main`` runs each subcommand through :func:`run`. A command raises :class:`InputError` for
input it cannot use (the message names the flag or path and what to do, never what a file
holds); :func:`run` prints ``fgentic-governance <command>: <message>`` and exits 2 (or the
command's documented code, ``unusable_exit`` in its defaults: ``corpus`` keeps 1). Errors that
escape a command from code outside ``cli/`` (a server's start-up) are recognised here by what
they are and where they were raised: a Kubernetes client configuration that cannot be loaded,
a file named by a flag that cannot be opened, the API server unreachable or refusing. Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final

EXIT_FAILED: Final = 1
"""The command ran and failed (the cluster or store unavailable, an erasure not verified): an
outage is never 2, which says the input must change."""
EXIT_UNUSABLE: Final = 2
"""The input cannot be used: nothing was done."""
SUBCOMMANDS: Final = ("target", "action", "corpus_command")
"""The parser's dests of nested subcommands (render, memory, corpus)."""
POSITIONAL: Final = frozenset({"file", "suite"})
_REASONS: Final = {errno.ENOENT: "no such file or directory", errno.EACCES: "permission denied",
                   errno.EPERM: "permission denied", errno.EISDIR: "is a directory",
                   errno.ENOTDIR: "a part of it is not a directory",
                   errno.EROFS: "read-only file system", errno.ENOSPC: "no space left"}


class InputError(Exception):
    """Input a command cannot use; the message is one content-free sentence."""


def command_name(args: argparse.Namespace) -> str:
    """``render webhook-config``, ``memory status``, ``operator``..."""
    words = [str(getattr(args, "command", "") or "")]
    words += [str(getattr(args, dest)) for dest in SUBCOMMANDS if getattr(args, dest, None)]
    return " ".join(word for word in words if word)


def flag(dest: str) -> str:
    """How the user wrote the argument stored at ``dest`` (positional ones have no flag)."""
    return "" if dest in POSITIONAL else "--" + dest.replace("_", "-")


def named(dest: str, path: Path | str) -> str:
    """``--ca-file ca.pem``, or ``bindings.yaml`` for a positional argument."""
    return f"{flag(dest)} {path}".strip()


def report(command: str, message: str) -> None:
    print(f"fgentic-governance {command}: {message}", file=sys.stderr)


def fail(args: argparse.Namespace, message: str, code: int = EXIT_FAILED) -> int:
    """A command's own failure or refusal as its one line, prefixed like every other
    (``fgentic-governance memory status: refused: SCOPE_MISSING``); returns ``code``."""
    report(command_name(args), message)
    return code


def run(command: Callable[[], int], args: argparse.Namespace) -> int:
    """``command()``'s exit code; an input or start-up error as one line and its exit code."""
    name = command_name(args)
    unusable = int(getattr(args, "unusable_exit", EXIT_UNUSABLE))
    try:
        return command()
    except InputError as exc:
        report(name, str(exc))
        return unusable
    except SystemExit as exc:  # a server's own one-sentence refusal: raise SystemExit("...")
        if not isinstance(exc.code, str):
            raise
        report(name, exc.code)
        return unusable
    except Exception as exc:
        known = recognised(exc, args)
        if known is None:
            raise
        message, code = known
        report(name, message)
        return unusable if code == EXIT_UNUSABLE else code


def recognised(exc: BaseException, args: argparse.Namespace) -> tuple[str, int] | None:
    """(message, exit code) for an error that input or the environment explains, else None."""
    if raised_in(exc, "kubernetes.config"):
        return kube_problem(getattr(args, "kubeconfig", None), exc), EXIT_UNUSABLE
    if isinstance(exc, OSError) and exc.filename is not None:
        where = _named_path(args, Path(str(exc.filename)))
        if where is not None:
            reason = _REASONS.get(exc.errno or 0, f"cannot be used ({type(exc).__name__})")
            return f"{where}: {reason}", EXIT_UNUSABLE
    return _kube_api_problem(exc)


def kube_problem(kubeconfig: Path | None, exc: BaseException) -> str:
    kind = type(exc).__name__
    if kubeconfig is not None:
        return (f"--kubeconfig {kubeconfig}: not a usable kubeconfig ({kind}); "
                f"`kubectl --kubeconfig {kubeconfig} config view` shows what it defines")
    return (f"no usable Kubernetes credentials ({kind}): not in a Pod, and KUBECONFIG or "
            "~/.kube/config is missing or unusable; pass --kubeconfig")


def raised_in(exc: BaseException, package: str) -> bool:
    """Whether ``exc`` was raised (or passed) through code of ``package``."""
    trace: TracebackType | None = exc.__traceback__
    while trace is not None:
        module = str(trace.tb_frame.f_globals.get("__name__", ""))
        if module == package or module.startswith(package + "."):
            return True
        trace = trace.tb_next
    return False


def _named_path(args: argparse.Namespace, path: Path) -> str | None:
    """``--flag PATH`` when ``path`` is a flag's file or lies in a flag's directory."""
    given = [(dest, value) for dest, values in vars(args).items()
             for value in (values if isinstance(values, list) else [values])
             if isinstance(value, Path)]
    for dest, value in given:
        if path == value:
            return named(dest, path)
    for dest, value in given:
        if path.is_relative_to(value):
            return f"{named(dest, value)}: {path.relative_to(value)}"
    return None


def _kube_api_problem(exc: BaseException) -> tuple[str, int] | None:
    """The API server unreachable, or refusing a request: its status only, never its body."""
    if "kubernetes" not in sys.modules:
        return None
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from fgentic_governance.kube.failures import RequestFailed

    if isinstance(exc, RequestFailed):  # which request and why (kube/failures.py)
        return str(exc), EXIT_FAILED

    if isinstance(exc, ApiException):
        return (f"the Kubernetes API server refused a request (status {exc.status}); check "
                "the credentials' permissions"), EXIT_FAILED
    if isinstance(exc, HTTPError) and raised_in(exc, "kubernetes"):
        return (f"the Kubernetes API server cannot be reached ({type(exc).__name__}); check "
                "the cluster and the kubeconfig's server"), EXIT_FAILED
    return None
