"""The appservice-namespace registry (api/appservice.py): full matches over the complete MXID,
one entry per network, portable regular expressions, one flag for every process."""

from __future__ import annotations

import argparse
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fgentic_governance.api.appservice import (
    EMPTY,
    FLAG,
    AppserviceNamespace,
    AppserviceRegistry,
    RegistryError,
    add_flag,
    parse_registry,
)
from tests.support.appservice import puppet, telegram

SERVER = "fgentic.local"
LOCALPART = st.text("abcdefghijklmnopqrstuvwxyz0123456789._=-/", min_size=1, max_size=24)
TWO = AppserviceRegistry([
    AppserviceNamespace(network="telegram", user_regex=r"@telegram_[0-9]+:fgentic\.local"),
    AppserviceNamespace(network="slack", user_regex=r"@slack_.*:fgentic\.local"),
])


@pytest.mark.parametrize(("mxid", "networks"), [
    (puppet(SERVER), {"telegram"}),
    ("@slack_U1:fgentic.local", {"slack"}),
    ("@alice:fgentic.local", set()),
    # A full match over the complete MXID: no prefix, suffix or other server gets in or out.
    ("@telegram_123:fgentic.local.evil", set()),
    ("x@telegram_123:fgentic.local", set()),
    ("@telegram_123:fgentic_local", set()),
    ("@telegram_abc:fgentic.local", set()),
])
def test_a_namespace_holds_exactly_the_mxids_its_regex_fully_matches(
        mxid: str, networks: set[str]) -> None:
    assert TWO.networks(mxid) == networks
    assert TWO.holds(mxid) is bool(networks)


@given(LOCALPART, st.sampled_from([SERVER, "remote.example"]))
def test_holds_is_a_full_match_of_some_entry(localpart: str, server: str) -> None:
    mxid = f"@{localpart}:{server}"
    expected = {ns.network for ns in TWO.namespaces if re.fullmatch(ns.user_regex, mxid)}
    assert TWO.networks(mxid) == expected
    assert not EMPTY.holds(mxid) and EMPTY.networks(mxid) == frozenset()


@given(st.lists(st.tuples(st.from_regex(r"[a-z][a-z0-9]{0,10}", fullmatch=True),
                          st.sampled_from([r"@a_.*:x\.org", r"@[0-9]+:x\.org", "@b:x.org"])),
                unique_by=lambda pair: pair[0], max_size=5))
def test_the_flag_value_round_trips(entries: list[tuple[str, str]]) -> None:
    registry = AppserviceRegistry(
        [AppserviceNamespace(network=n, user_regex=r) for n, r in entries])
    assert parse_registry(registry.flag_value()).namespaces == registry.namespaces


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not a JSON list"),
    ('{"network": "x"}', "appservice namespaces"),
    ('[{"network": "telegram"}]', "userRegex"),
    ('[{"network": "telegram", "userRegex": "(@unclosed", "extra": 1}]', "appservice"),
    ('[{"network": "telegram", "user_regex": "@t_.*"}]', "appservice namespaces"),
    ('[{"network": "Tele gram", "userRegex": "@t_.*"}]', "network"),
    ('[{"network": "telegram", "userRegex": "(@unclosed"}]', "not a valid regular expression"),
    ('[{"network": "telegram", "userRegex": "@(?!admin)t_.*"}]', "not portable"),
    ('[{"network": "telegram", "userRegex": "@(?<=x)t_.*"}]', "not portable"),
    ('[{"network": "telegram", "userRegex": "@(t)_\\\\1"}]', "not portable"),
    ('[{"network": "telegram", "userRegex": "@t_.*+"}]', "not portable"),
    ('[{"network": "t", "userRegex": "@a"}, {"network": "t", "userRegex": "@b"}]',
     "duplicate network"),
])
def test_an_unusable_registry_is_refused_naming_no_expression(text: str, message: str) -> None:
    with pytest.raises(RegistryError, match=message) as refused:
        parse_registry(text)
    assert "unclosed" not in str(refused.value) and "admin" not in str(refused.value)


def test_an_empty_flag_is_the_empty_registry() -> None:
    assert parse_registry("") is EMPTY and parse_registry("[]").namespaces == ()
    assert not EMPTY and telegram(SERVER)


def test_every_process_reads_the_same_flag(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_flag(parser)
    assert parser.parse_args([]).appservice_namespaces is EMPTY
    value = telegram(SERVER).flag_value()
    assert parser.parse_args([FLAG, value]).appservice_namespaces.holds(puppet(SERVER))
    with pytest.raises(SystemExit):
        parser.parse_args([FLAG, '[{"network": "t", "userRegex": "(?=secret-shape)"}]'])
    assert "secret-shape" not in capsys.readouterr().err  # argparse would echo the value
