"""pgvector text literals (memory/model.py): the float fast path says exactly what the checked
path says, and both refuse what cannot be an embedding."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fgentic_governance.memory import StoreRefusal
from fgentic_governance.memory.model import EMBEDDING_DIMENSIONS, FLOAT4_MAX, vector_literal

FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


@given(st.lists(st.tuples(st.integers(0, EMBEDDING_DIMENSIONS - 1), FLOATS), max_size=8),
       st.booleans())
def test_floats_are_written_exactly_or_refused(
    changes: list[tuple[int, float]], one_int: bool
) -> None:
    values: list[float] = [0.25] * EMBEDDING_DIMENSIONS
    for index, value in changes:
        values[index] = value
    mixed: list[float] = [*values[:-1], 3] if one_int else values  # ints take the checked path
    if all(math.isfinite(v) and abs(v) <= FLOAT4_MAX for v in mixed):  # pgvector's range
        literal = vector_literal(mixed)
        assert literal == "[" + ",".join(repr(float(v)) for v in mixed) + "]"
        assert [float(x) for x in literal[1:-1].split(",")] == [float(v) for v in mixed]
    else:
        with pytest.raises(StoreRefusal):
            vector_literal(mixed)


@pytest.mark.parametrize("bad", [True, "0.5", None, float("nan"), -math.inf])
def test_non_numbers_and_non_finite_components_are_refused(bad: object) -> None:
    with pytest.raises(StoreRefusal):
        vector_literal([0.5] * (EMBEDDING_DIMENSIONS - 1) + [bad])  # type: ignore[list-item]


def test_wrong_shapes_are_refused() -> None:
    for values in ([0.5] * (EMBEDDING_DIMENSIONS - 1), [0.5] * (EMBEDDING_DIMENSIONS + 1), "x"):
        with pytest.raises(StoreRefusal):
            vector_literal(values)  # type: ignore[arg-type]
