"""The strict JSON reader of the shared server: what it refuses, with which code, and that a
refusal never carries the input; the code-only exceptions; the process shell (the servers
themselves are tested in integration)."""

from __future__ import annotations

import argparse
import asyncio
import math
import pickle
import random
import signal
import struct
import subprocess
import sys
import urllib.request
from typing import Any

import pytest

from fgentic_devenv import free_port
from fgentic_governance.controlapi.codes import ControlError, ControlReason, Drift
from fgentic_governance.memory.errors import StoreRefusal
from fgentic_governance.memoryapi.codes import ApiError, ApiReason
from fgentic_governance.reasons import Coded, Reason
from fgentic_governance.serving import http as serving
from fgentic_governance.serving import process, strict_json
from fgentic_governance.serving.strict_json import Refusal, Refused

SENTINEL = "SENTINEL-5ee7"


@pytest.mark.parametrize(("raw", "code"), [
    (f'{{"a": 1, "a": "{SENTINEL}"}}'.encode(), Refusal.DUPLICATE_NAME),
    (f'{{"x": [{{"subject": "@bob:x", "subject": "{SENTINEL}"}}]}}'.encode(),
     Refusal.DUPLICATE_NAME),
    (b'{"a": NaN}', Refusal.NUMBER_INVALID),
    (b'[Infinity]', Refusal.NUMBER_INVALID),
    (b'[-Infinity]', Refusal.NUMBER_INVALID),
    (b'[1e999]', Refusal.NUMBER_INVALID),
    (b'{"a": "\xff"}', Refusal.NOT_UTF8),
    (b'{"a": "\\ud800"}', Refusal.NOT_UTF8),
    (b'{"\\udc00": 1}', Refusal.NOT_UTF8),
    (f'{{"{SENTINEL}"'.encode(), Refusal.NOT_JSON),
    (b'', Refusal.NOT_JSON),
    (b'[' * 100_000 + b']' * 100_000, Refusal.TOO_DEEP),
    (b'[' * 129 + b']' * 129, Refusal.TOO_DEEP),
    (b'{"a":' * 129 + b'1' + b'}' * 129, Refusal.TOO_DEEP),
])
def test_refusals_carry_only_a_code(raw: bytes, code: Refusal) -> None:
    with pytest.raises(Refused) as info:
        strict_json.loads(raw)
    assert info.value.code is code
    assert str(info.value) == code.value and info.value.status == 400
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize(("raw", "value"), [
    (b'{"a": 1, "b": {"a": 2}}', {"a": 1, "b": {"a": 2}}),
    (b'[1.5, -0.0, 1e300, 12345678901234567890]', [1.5, -0.0, 1e300, 12345678901234567890]),
    (b'"\\ud83d\\ude00 \\\\ud800"', "\U0001f600 \\ud800"),  # a pair; an escaped backslash
    (b'"\\u003cb\\u003e"', "<b>"),
])
def test_valid_json_is_returned(raw: bytes, value: object) -> None:
    assert strict_json.loads(raw) == value


def test_unchecked_floats_overflow_to_inf_but_constants_are_still_refused() -> None:
    """``finite_floats=False`` leaves the finite check to the caller (module docstring)."""
    assert strict_json.loads(b'[1e999, 0.5]', finite_floats=False) == [float("inf"), 0.5]
    for raw in (b'[NaN]', b'[Infinity]', b'[-Infinity]'):
        with pytest.raises(Refused) as info:
            strict_json.loads(raw, finite_floats=False)
        assert info.value.code is Refusal.NUMBER_INVALID
    with pytest.raises(Refused) as info:
        strict_json.loads(b'{"a": 1, "a": 2}', finite_floats=False)
    assert info.value.code is Refusal.DUPLICATE_NAME


def _token(rng: random.Random) -> bytes:
    """A float literal in one of the notations providers send, from any finite double."""
    value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
    if not math.isfinite(value):
        value = rng.uniform(-1.0, 1.0)
    text = rng.choice((repr(value), f"{value:.17e}", f"{value:.9g}", f"{value:.25E}"))
    return (text if "e" in text.lower() or "." in text else text + ".0").encode()


def _loads_result(raw: bytes, loads: Any) -> Any:
    try:
        return ("value", loads(raw))
    except Refused as refused:
        return ("refused", refused.code)


def test_loads_floats_reads_what_loads_reads_and_refuses_what_it_refuses() -> None:
    """The two-pass reader (every rule of ``loads``, then the values from pydantic's parser)
    gives the same structure and bit-identical doubles as ``loads(finite_floats=False)``."""
    rng = random.Random(40)
    tokens = [_token(rng) for _ in range(4000)]
    edges = [b"1e999", b"-1e999", b"1e-400", b"-0.0", b"4.9e-324", b"2.4703282292062328e-324",
             b"2.4703282292062327e-324", b"3.4028235677973366e38", b"0." + b"1" * 400]
    answer = b'{"data": [{"index": 0, "embedding": [' + b", ".join(tokens + edges) + b"]}]}"
    expected = strict_json.loads(answer, finite_floats=False)
    got = strict_json.loads_floats(answer)
    assert got == expected
    pack = struct.Struct(f"<{len(tokens) + len(edges)}d").pack
    assert pack(*got["data"][0]["embedding"]) == pack(*expected["data"][0]["embedding"])
    for raw in (b'[1.5, -0.0, 1e300, 12345678901234567890]', b'{"a": 1, "b": {"a": 2.5}}',
                b'{"a": 1, "a": 2.5}', b'[NaN]', b'[1.0, Infinity]', b'"\\ud800"', b'"\xff"',
                b'[1.0,]', b"", b'[' * 129 + b']' * 129, b'{"\\u0061": 1.25, "b": "\\u00e9"}'):
        assert _loads_result(raw, strict_json.loads_floats) == _loads_result(
            raw, lambda r: strict_json.loads(r, finite_floats=False)), raw


def test_the_depth_bound_is_inclusive_and_a_parameter() -> None:
    depth_max = strict_json.MAX_JSON_DEPTH
    parsed = strict_json.loads(b'[' * depth_max + b']' * depth_max)
    depth = 1
    while parsed:
        parsed, depth = parsed[0], depth + 1
    assert depth == strict_json.MAX_JSON_DEPTH
    assert strict_json.loads(b'{"a": {"b": 1}}', max_depth=2) == {"a": {"b": 1}}
    with pytest.raises(Refused):
        strict_json.loads(b'{"a": {"b": []}}', max_depth=2)


def test_body_refusal_statuses() -> None:
    assert Refused(Refusal.BODY_TOO_LARGE).status == 413
    assert Refused(Refusal.BODY_TIMEOUT).status == 408
    assert Refused(Refusal.BODY_INCOMPLETE).status == 400


def test_method_labels_are_bounded() -> None:
    assert serving.method_label("POST") == "POST"
    assert serving.method_label(SENTINEL) == "OTHER"


class _Arriving:
    """What BodyBudget reads of a request: its source address and declared length."""

    def __init__(self, remote: str, content_length: int) -> None:
        self.remote, self.content_length = remote, content_length


def test_the_body_budget_holds_bytes_as_they_arrive_and_per_source() -> None:
    """N9: a declared length reserved up front let connections that declared 1 MiB and sent a
    byte hold the whole budget; one source may now hold only its share."""
    from typing import cast

    from aiohttp import web

    budget = serving.BodyBudget(10, per_source=6)
    slow = [cast(web.BaseRequest, _Arriving("10.0.0.1", 10)) for _ in range(3)]
    with budget.hold(slow[0]) as first, budget.hold(slow[1]), budget.hold(slow[2]):
        assert budget.held == 0  # Declared, not arrived: nothing held.
        assert first.take(6)
        assert not first.take(1)  # The source's share is used up.
        with budget.hold(cast(web.BaseRequest, _Arriving("10.0.0.2", 4))) as other:
            assert other.take(4)  # Another source still has the rest.
            assert not other.take(1)  # The whole budget.
            assert budget.by_source == {"10.0.0.1": 6, "10.0.0.2": 4}
        assert budget.held == 6
    assert budget.held == 0 and budget.by_source == {}


# -- code-only exceptions ------------------------------------------------------------------------


@pytest.mark.parametrize("error", [
    Refused(Refusal.NOT_JSON),
    StoreRefusal(Reason.SCOPE_DISABLED),
    ApiError(ApiReason.AGENT_MISMATCH),
    ControlError(ControlReason.ROOM_STATE_DRIFT, (Drift.JOIN_RULE,)),
])
def test_coded_exceptions_carry_their_code_and_nothing_else(error: Coded[Any]) -> None:
    code = error.code
    assert isinstance(error, Coded)
    assert str(error) == code.value and error.args == (code.value,)
    assert repr(error) == f"{type(error).__name__}({code.value})"
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and copy.code is code
    assert getattr(copy, "drift", ()) == getattr(error, "drift", ())


def test_store_refusal_keeps_its_reason_name() -> None:
    assert StoreRefusal(Reason.LEASE_MISSING).reason is Reason.LEASE_MISSING


# -- the process shell ---------------------------------------------------------------------------


async def test_the_shell_cancels_tasks_then_awaits_cleanups_last_registered_first() -> None:
    stop, order = asyncio.Event(), []

    async def setup(shell: process.Shell) -> None:
        task = shell.background(asyncio.Event().wait())

        async def cleanup(name: str) -> None:
            order.append((name, task.cancelling() > 0 or task.cancelled()))

        shell.on_stop(lambda: cleanup("first"))
        shell.on_stop(lambda: cleanup("second"))
        stop.set()

    await process.serve_until_stopped(setup, stop)
    assert order == [("second", True), ("first", True)]


async def test_a_hung_cleanup_is_bounded_and_the_rest_still_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "STOP_TIMEOUT", 0.05)
    stop, done = asyncio.Event(), []

    async def hang() -> None:
        await asyncio.Event().wait()

    async def setup(shell: process.Shell) -> None:
        shell.on_stop(lambda: asyncio.sleep(0, done.append("earlier")))
        shell.on_stop(hang)
        stop.set()

    await asyncio.wait_for(process.serve_until_stopped(setup, stop), 5)
    assert done == ["earlier"]


async def test_a_failed_setup_is_torn_down_and_raises() -> None:
    done = []

    async def setup(shell: process.Shell) -> None:
        shell.on_stop(lambda: asyncio.sleep(0, done.append("cleaned")))
        raise RuntimeError

    with pytest.raises(RuntimeError):
        await process.serve_until_stopped(setup, asyncio.Event())
    assert done == ["cleaned"]


_PROCESS = """
import asyncio, sys
from fgentic_governance.serving import http, process

async def setup(shell):
    await shell.serve(http.health_handler(), "127.0.0.1", int(sys.argv[1]))
    shell.on_stop(lambda: asyncio.sleep(0, print("stopped", flush=True)))
    print("serving", flush=True)

sys.exit(process.run(setup, fast_loop=sys.argv[2] == "fast"))
"""


@pytest.mark.parametrize("loop", ["fast", "asyncio"])
def test_a_process_serves_until_sigterm_and_exits_zero(loop: str) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", _PROCESS, str(port), loop],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"serving\n"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.status == 200
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0 and out == b"stopped\n"


def test_serving_flags_keep_their_names_and_defaults() -> None:
    parser = argparse.ArgumentParser()
    process.add_serving_flags(parser, port=8443, metrics=True)
    args = parser.parse_args([])
    assert (args.host, args.port, args.metrics_port) == ("0.0.0.0", 8443, 0)
    bare = argparse.ArgumentParser()
    process.add_serving_flags(bare, port=9090)
    assert not hasattr(bare.parse_args([]), "metrics_port")
