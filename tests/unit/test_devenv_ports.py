"""Test ports come from below the ephemeral range, are free and are not handed out twice."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import fgentic_devenv
from fgentic_devenv import free_port


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    if low > 20000:
        assert all(20000 <= port < min(30000, low) for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))


def test_a_taken_port_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        monkeypatch.setattr(fgentic_devenv, "_pick_range", lambda: range(taken, taken + 1))
        monkeypatch.setattr(fgentic_devenv, "_handed_out", set())
        port = free_port()
    assert port != taken


def test_a_machine_without_room_below_the_range_gets_the_kernels_pick(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("1024\t65535\n")
    monkeypatch.setattr(fgentic_devenv, "_EPHEMERAL_RANGE", fake)
    assert not fgentic_devenv._pick_range()
    assert free_port() >= 1024
