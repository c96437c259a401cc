"""CEL fragments for agentgateway v1.3.1 policies.

Every rule the renderer emits is a `require` (or a conditional/metadata expression): in v1.3.1
a `deny` rule whose expression fails to evaluate lets the request through, while a failing
`require` denies. Expressions are therefore written so that a missing header, a body that is
not JSON, or an absent field makes them fail or evaluate to false.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

BODY = "json(request.body)"
"""The parsed request body; referencing it makes agentgateway buffer the body first."""


def lit(value: str) -> str:
    """A CEL string literal. JSON's escapes (with ASCII output) are a subset of CEL's."""
    return json.dumps(value, ensure_ascii=True)


def lit_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(lit(v) for v in values) + "]"


def raw(header: str) -> str:
    """Every value of a request header, as a list (absent header: evaluation error)."""
    return f"request.headers.raw()[{lit(header)}]"


def count(header: str) -> str:
    """The number of values of a request header, as a string (absent header: error)."""
    return f"string(size({raw(header)}))"


def exactly_one(header: str) -> str:
    return f"size({raw(header)}) == 1"


def exactly(header: str, value: str) -> str:
    """Exactly one value, equal to ``value``."""
    return f"{raw(header)} == [{lit(value)}]"


def only_reserved(prefix: str, allowed: Iterable[str]) -> str:
    """No header under ``prefix`` other than ``allowed`` (names are lowercase in CEL)."""
    return (f"!request.headers.exists(h, h.startsWith({lit(prefix)}) && "
            f"!(h in {lit_list(allowed)}))")


def body_method_is(method: str) -> str:
    return f"{BODY}.method == {lit(method)}"


# Each field in every spelling a runtime reads: a2a-sdk 0.3's models validate by name as well
# as by alias, and protobuf JSON (a2a-sdk 1.x) accepts the proto field name too.
TASK_REFERENCES = ("contextId", "context_id", "taskId", "task_id", "referenceTaskIds",
                   "reference_task_ids")


def no_task_references() -> str:
    """The message starts a fresh context: no context id, task id or reference task ids at
    all, in either spelling (an empty value is present too). A missing `params.message` is an
    error, so it fails."""
    message = f"{BODY}.params.message"
    return " && ".join(f"!has({message}.{field})" for field in TASK_REFERENCES)


def synchronous(fields: Iterable[str], immediate: bool) -> str:
    """`params.configuration.<field>` absent or exactly the synchronous boolean (the opposite
    of ``immediate``), for each spelling in ``fields``. Only that boolean: a runtime's lax
    parser may read "false" or 0 as false, so no other value is let through."""
    config = f"{BODY}.params.configuration"
    wait = "false" if immediate else "true"
    each = [f"(!has({config}.{field}) || {config}.{field} == {wait})" for field in fields]
    return f"!has({config}) || (" + " && ".join(each) + ")"


def one_of(header: str, values: Iterable[str], *, optional: bool) -> str:
    """Exactly one value of the header, one of ``values``; or, if ``optional``, no value at all
    (a present empty value is not absence)."""
    rules = [f"!({lit(header)} in request.headers)"] if optional else []
    rules += [exactly(header, value) for value in values]
    return " || ".join(f"({rule})" for rule in rules)


def all_of(*expressions: str) -> str:
    return " && ".join(f"({e})" for e in expressions)
