"""memory/extension.py: which pgvector versions the store accepts (issue 36 §5)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fgentic_governance.memory import extension

_NUMBER = st.integers(min_value=0, max_value=999_999)


def test_the_minimum_is_the_first_release_without_the_hnsw_vacuum_defects() -> None:
    assert extension.MIN_PGVECTOR == (0, 8, 4)
    assert extension.MIN_PGVECTOR_TEXT == "0.8.4"


def test_releases_around_the_minimum() -> None:
    refused = ["0.8.2", "0.8.3", "0.8.0", "0.7.4", "0.8", "0.5.1"]
    accepted = ["0.8.4", "0.8.6", "0.9.0", "0.10.0", "1.0", "1.0.0"]
    assert [v for v in refused if not extension.outdated(v)] == []
    assert [v for v in accepted if extension.outdated(v)] == []


def test_anything_but_a_plain_release_number_is_refused() -> None:
    for text in (None, "", "0.8.6-dev", "v0.8.6", " 0.8.6", "0.8.6\n", "0.8.x", "1", "0..8",
                 "0.8.6.1", "1234567.0.0", "\u0660.\u0668.\u0666"):  # Arabic-Indic digits
        assert extension.parse(text) is None, text
        assert extension.outdated(text), text


@given(_NUMBER, _NUMBER, _NUMBER)
def test_a_release_number_parses_back_and_is_refused_exactly_below_the_minimum(
        major: int, minor: int, patch: int) -> None:
    text = f"{major}.{minor}.{patch}"
    assert extension.parse(text) == (major, minor, patch)
    assert extension.outdated(text) == ((major, minor, patch) < extension.MIN_PGVECTOR)
    assert extension.spelt(text) == text


@given(_NUMBER, _NUMBER)
def test_a_missing_patch_number_counts_as_zero(major: int, minor: int) -> None:
    assert extension.parse(f"{major}.{minor}") == (major, minor, 0)


@given(st.text(max_size=40))
def test_a_log_line_never_carries_the_servers_own_text(text: str) -> None:
    """Whatever a catalog holds, the log gets digits and dots rebuilt from its numbers."""
    spelt = extension.spelt(text)
    assert spelt == "unreadable" or set(spelt) <= set("0123456789.")
    assert extension.outdated(text) or extension.parse(text) is not None
