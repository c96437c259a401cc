"""Cost of decoding and validating an X-Fgentic-Identity / Room-Context header.

Prints, per projection, the time of `decode_*` (one value, sizes, strict base64url, strict
shape, JCS canonical form, cross-field rules and clock) as a ratio to the floor any consumer
pays: plain base64 decoding plus `json.loads` of the same header, measured in the same run.
The target is a ratio of at most 5; this script reports figures and never asserts timings.

    .venv/bin/python benchmarks/bench_codec.py [--number N] [--repeat R]
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fgentic_governance import contract
from fgentic_governance.contract import (
    AgentRef,
    BridgedPrincipal,
    MatrixPrincipal,
    RoomContext,
)

_DATA = Path(contract.__file__).parent / "testdata"
_NOW = 1784117000


def _adr(name: str) -> contract.AnyIdentity:
    return contract.load_identity((_DATA / name).read_bytes())


def _large_matrix() -> contract.AnyIdentity:
    """A 16-reader bridged projection near the 6,144-byte ceiling: the worst realistic case."""
    base = _adr("adr0017_matrix_projection.json")
    assert not isinstance(base, contract.OAuthProjection)
    readers: list[contract.Principal] = [
        BridgedPrincipal(kind="bridged_matrix", network="slack",
                         principal=f"@slack-{'u' * 180}{i:02d}:org-a.example")
        for i in range(15)
    ]
    readers.append(MatrixPrincipal(kind="matrix", principal="@alice:org-a.example"))
    readers.sort(key=contract.semantics.sort_key)
    return base.model_copy(update={"audience": tuple(readers)})


def _cases() -> list[tuple[str, str, Callable[[list[str]], Any]]]:
    matrix = _adr("adr0017_matrix_projection.json")
    oauth = _adr("adr0017_oauth_projection.json")
    agent = AgentRef(name="knowledge-agent", namespace="kagent")
    assert isinstance(matrix, contract.MatrixProjection)
    context = RoomContext(
        allowed_classifications=matrix.allowed_classifications, audience=matrix.audience,
        caller=MatrixPrincipal(kind="matrix", principal=matrix.principal),
        delegation_id=matrix.delegation_id, room=matrix.room, v=1)

    def identity(values: list[str]) -> Any:
        return contract.decode_identity(values, now=_NOW, agent=agent)

    def room(values: list[str]) -> Any:
        return contract.decode_room_context(values, user_id=matrix.principal)

    return [
        ("matrix (ADR example)", contract.encode_identity(matrix), identity),
        ("oidc_client (ADR example)", contract.encode_identity(oauth), identity),
        ("matrix, 16 readers", contract.encode_identity(_large_matrix()), identity),
        ("room context", contract.encode_room_context(context), room),
    ]


def _baseline(value: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))


def _interleaved(
    base: Callable[[], Any], full: Callable[[], Any], number: int, repeat: int
) -> tuple[float, float]:
    """Seconds per call of each, timed alternately so both see the same machine load; the
    minimum over the runs is the usual guard against noise."""
    base_runs, full_runs = [], []
    for _ in range(repeat):
        base_runs.append(timeit.timeit(base, number=number))
        full_runs.append(timeit.timeit(full, number=number))
    return min(base_runs) / number, min(full_runs) / number


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(f"{'projection':<28}{'bytes':>7}{'baseline us':>13}{'decode us':>11}{'ratio':>8}")
    for name, value, decode in _cases():
        values = [value]
        decode(values)  # warm up, and prove the header is valid
        base, full = _interleaved(functools.partial(_baseline, value),
                                  functools.partial(decode, values), args.number, args.repeat)
        print(f"{name:<28}{len(value):>7}{base * 1e6:>13.2f}{full * 1e6:>11.2f}"
              f"{full / base:>7.2f}x")
    print("baseline: base64url decode + json.loads of the same header; target ratio <= 5.00x")


if __name__ == "__main__":
    main()
