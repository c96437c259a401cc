"""``fgentic-governance memory ...``: content-free store inspection for platform engineers.

A platform operator never sees personal memory (ADR 0023 §18): these commands print scope
keys, states, counts, generations and erasure receipts - nothing from an entry, and nothing
that names the subject. The DSN is read from ``--store-dsn-file`` (the operator's Secret).
The MemoryScope object is read for its phase and last erasure when the API server is
reachable (``--no-kube`` skips it); the store alone answers everything else.

A DSN file that is missing, unreadable or holds no PostgreSQL URI, and a ``--kubeconfig`` that
cannot be loaded, are input errors (exit 2, one line naming the flag; ``cli.errors``), told
apart from the store refusing (``refused: <CODE>``, exit 2); nothing is read or erased then.
The store unreachable or busy (``refused: STORE_UNAVAILABLE``, ``STORE_LOCK_TIMEOUT``) is an
outage, not input to change: exit 1. Every such line starts ``fgentic-governance memory <action>:``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fgentic_governance.api.common import DNS1123_LABEL
from fgentic_governance.cli import inputs
from fgentic_governance.cli.errors import fail
from fgentic_governance.reasons import Reason

if TYPE_CHECKING:  # Imported when a command runs: building the CLI parser stays light.
    from fgentic_governance.controlapi.cluster_directory import KubeDirectory
    from fgentic_governance.memory import ErasureReceipt, MemoryStore, ScopeState

    Command = Callable[[argparse.Namespace, MemoryStore, KubeDirectory | None], Awaitable[int]]

_LABEL = DNS1123_LABEL.strip("^$")
_SCOPE_KEY = re.compile(rf"^{_LABEL}/{_LABEL}$")
EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2
OUTAGES = frozenset({Reason.STORE_UNAVAILABLE, Reason.STORE_LOCK_TIMEOUT})
"""The store down or busy: the same command may succeed later (exit 1, not 2)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    status = actions.add_parser("status", help="phase, generation, entry count, last erasure")
    status.add_argument("scope", help="<namespace>/<name> of the MemoryScope")
    listing = actions.add_parser("list-scopes", help="scope keys and entry counts")
    listing.add_argument("--subject", help="only this exact subject MXID's scopes")
    erase = actions.add_parser("erase-scope", help="erase every entry of a scope and verify")
    erase.add_argument("scope", help="<namespace>/<name> of the MemoryScope")
    for sub in (status, listing, erase):
        sub.add_argument("--store-dsn-file", type=Path, required=True,
                         help="file holding the PostgreSQL DSN (mounted from a Secret)")
        sub.add_argument("--json", action="store_true", help="one JSON document per line")
    for sub in (status, erase):
        sub.add_argument("--kubeconfig", type=Path, help="default: in-cluster, ~/.kube/config")
        sub.add_argument("--no-kube", action="store_true",
                         help="do not read or update the MemoryScope object")
    parser.set_defaults(func=run_memory)


def run_memory(args: argparse.Namespace) -> int:
    from fgentic_governance.memory import StoreRefusal

    commands: dict[str, Command] = {
        "status": _status, "list-scopes": _list_scopes, "erase-scope": _erase_scope}
    command = commands[args.action]
    # Before the store: a --kubeconfig that cannot be used stops the command with nothing done.
    directory = _kube(args)

    async def main() -> int:
        async with store_from_file(args.store_dsn_file) as store:
            return await command(args, store, directory)

    try:
        return asyncio.run(main())
    except StoreRefusal as refusal:
        return _refused(args, refusal.reason)
    except OSError:
        return _refused(args, Reason.STORE_UNAVAILABLE)


@asynccontextmanager
async def store_from_file(dsn_file: Path) -> AsyncIterator[MemoryStore]:
    """The fenced store at the DSN a mounted Secret holds (a small, bounded pool)."""
    import asyncpg

    from fgentic_governance.memory import MemoryStore, bounds
    from fgentic_governance.memory.dsn import read_write
    from fgentic_governance.memory.errors import guarded

    pool = await guarded(asyncpg.create_pool(read_write(inputs.dsn(dsn_file)),
                                             **bounds.pool_kwargs(min_size=1, max_size=2)))
    try:
        yield MemoryStore(pool)
    finally:
        await pool.close()


def _refused(args: argparse.Namespace, reason: Reason) -> int:
    return fail(args, f"refused: {reason.value}",
                EXIT_FAILED if reason in OUTAGES else EXIT_REFUSED)


def _emit(args: argparse.Namespace, fields: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(fields, separators=(",", ":")))
    else:
        for key, value in fields.items():
            print(f"{key}: {'-' if value is None else value}")


def _scope_key(value: str) -> tuple[str, str] | None:
    if not _SCOPE_KEY.match(value):
        return None
    namespace, name = value.split("/")
    return namespace, name


def _kube(args: argparse.Namespace) -> KubeDirectory | None:
    """A KubeDirectory, or None with --no-kube (or for list-scopes) or when no default
    credentials can be found; a --kubeconfig that cannot be used is an InputError."""
    if getattr(args, "no_kube", True):
        return None
    from fgentic_governance.controlapi.cluster_directory import KubeDirectory

    if args.kubeconfig is not None:
        return KubeDirectory(inputs.kube_client(args.kubeconfig))
    try:
        return KubeDirectory(inputs.kube_client(None))
    except Exception:
        return None


def _state_fields(state: ScopeState) -> dict[str, Any]:
    return {"scope": state.scope_key, "enabled": state.enabled, "posture": state.posture.value,
            "generation": state.consent_generation, "entries": state.entry_count,
            "entryCap": state.entry_cap}


async def _status(args: argparse.Namespace, store: MemoryStore,
                  directory: KubeDirectory | None) -> int:
    key = _scope_key(args.scope)
    if key is None:
        return _refused(args, Reason.INVALID_SPEC)
    state = await store.scope_state(args.scope)
    fields = _state_fields(state)
    fields["hardExpiry"] = _iso(await store.latest_expiry(args.scope))
    fields.update(await _object_status(directory, *key))
    _emit(args, fields)
    return EXIT_OK


async def _object_status(directory: KubeDirectory | None, namespace: str,
                         name: str) -> dict[str, Any]:
    from fgentic_governance.controlapi.codes import ControlError, ControlReason

    if directory is None:
        return {"phase": None, "reasonCode": None, "lastErasure": None}
    try:
        status = await directory.scope_status(namespace, name)
    except ControlError:
        return {"phase": None, "reasonCode": ControlReason.DIRECTORY_UNAVAILABLE.value,
                "lastErasure": None}
    last = status.get("lastErasure") or {}
    return {"phase": status.get("phase"), "reasonCode": status.get("reasonCode"),
            "lastErasure": " ".join(str(last.get(k, "-")) for k in
                                    ("time", "result", "reasonCode", "receiptId")) if last
            else None}


async def _list_scopes(args: argparse.Namespace, store: MemoryStore,
                       _directory: KubeDirectory | None) -> int:
    states = await store.scope_states(args.subject)
    if not args.json:
        print("SCOPE\tENABLED\tGENERATION\tENTRIES")
    for state in states:
        if args.json:
            _emit(args, _state_fields(state))
        else:
            print(f"{state.scope_key}\t{str(state.enabled).lower()}\t"
                  f"{state.consent_generation}\t{state.entry_count}")
    return EXIT_OK


async def _erase_scope(args: argparse.Namespace, store: MemoryStore,
                       directory: KubeDirectory | None) -> int:
    key = _scope_key(args.scope)
    if key is None:
        return _refused(args, Reason.INVALID_SPEC)
    receipt = await store.erase_scope(args.scope)
    recorded = await _record(directory, key, receipt)
    _emit(args, {"receipt": receipt.id, "kind": receipt.kind.value,
                 "generation": receipt.generation, "result": receipt.result.value,
                 "reasonCode": receipt.reason.value, "time": _iso(receipt.time),
                 "deleted": receipt.deleted, "statusRecorded": recorded})
    return EXIT_OK if receipt.verified else EXIT_FAILED


async def _record(directory: KubeDirectory | None, key: tuple[str, str],
                  receipt: ErasureReceipt) -> bool:
    from fgentic_governance.controlapi.codes import ControlError

    if directory is None:
        return False
    try:
        await directory.record_erasure_at(*key, receipt.last_erasure())
    except ControlError:
        return False
    return True


def _iso(value: datetime | None) -> str | None:
    from fgentic_governance.controlapi.service import iso

    return iso(value)
