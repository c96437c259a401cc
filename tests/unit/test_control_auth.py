"""Workload authentication: the bearer token from a mounted file, compared in constant time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fgentic_governance.controlapi.auth import MIN_TOKEN_BYTES, BearerTokenFile

TOKEN = "t" * 24 + "0123456789abcdef"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")  # Secrets are often mounted with a trailing newline.
    return path


def test_the_mounted_token_is_admitted(token_file: Path) -> None:
    auth = BearerTokenFile(token_file)
    assert auth.ready()
    assert auth.admits(f"Bearer {TOKEN}")
    assert auth.admits(f"bearer {TOKEN}")


@pytest.mark.parametrize("header", [
    None, "", "Bearer", "Bearer ", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN[:-1]}",
    f"Bearer {TOKEN}x", f"Bearer {TOKEN.upper()}", "Bearer \u00e9" * 10,
])
def test_anything_else_is_refused(token_file: Path, header: str | None) -> None:
    assert not BearerTokenFile(token_file).admits(header)


def test_missing_or_short_token_file_refuses_everything(tmp_path: Path) -> None:
    missing = BearerTokenFile(tmp_path / "absent")
    assert not missing.ready()
    assert not missing.admits("Bearer ")
    short = tmp_path / "short"
    short.write_text("x" * (MIN_TOKEN_BYTES - 1))
    auth = BearerTokenFile(short)
    assert not auth.ready()
    assert not auth.admits("Bearer " + "x" * (MIN_TOKEN_BYTES - 1))
    empty = tmp_path / "empty"
    empty.write_text("")
    assert not BearerTokenFile(empty).admits("Bearer ")


def test_a_rotated_token_takes_effect_without_restart(token_file: Path) -> None:
    auth = BearerTokenFile(token_file)
    assert auth.admits(f"Bearer {TOKEN}")
    rotated = "r" * 40
    token_file.write_text(rotated)
    os.utime(token_file, ns=(1, 1))  # A different mtime even on a coarse-clock filesystem.
    assert auth.admits(f"Bearer {rotated}")
    assert not auth.admits(f"Bearer {TOKEN}")
    token_file.unlink()
    assert not auth.admits(f"Bearer {rotated}")
