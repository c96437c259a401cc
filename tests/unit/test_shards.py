"""Issue 39: the overlap rules of operator shards' claims (kube/shards.py), on Lease objects."""

from __future__ import annotations

import datetime as dt

from kubernetes import client

from fgentic_governance.kube.shards import LIVE_SECONDS, Claim, conflicts

NOW = dt.datetime(2026, 12, 6, 18, 0, tzinfo=dt.UTC)
STALE = NOW - dt.timedelta(seconds=LIVE_SECONDS + 1)


def _lease(name: str, claim: Claim, *, holder: str | None = "x-0", renewed: dt.datetime = NOW,
           claimed: dt.datetime = STALE) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name, namespace="home",
                                     annotations=claim.annotations(claimed)),
        spec=client.V1LeaseSpec(holder_identity=holder, renew_time=renewed,
                                lease_duration_seconds=30))


def test_disjoint_sets_do_not_overlap_and_a_shared_namespace_is_named() -> None:
    mine = Claim.of(["a1", "a2"], cluster_kinds=False)
    assert conflicts("me", mine, [_lease("b", Claim.of(["b1"], True))], NOW) == []
    found = conflicts("me", mine, [_lease("b", Claim.of(["a2", "b1"], True))], NOW)
    assert found == ["overlaps shard home/b (a2,b1): both own a2"]


def test_every_namespace_and_globs_overlap_everything() -> None:
    assert Claim.of([], False).namespaces is None
    assert Claim.of(["team-*"], False).namespaces is None  # a Kopf glob cannot be compared
    for everything in (Claim.of([], False), Claim.of(["!kube-*"], False)):
        assert conflicts("me", everything, [_lease("b", Claim.of(["b1"], False))], NOW)
        assert conflicts("me", Claim.of(["b1"], False), [_lease("b", everything)], NOW)


def test_two_shards_handling_the_cluster_scoped_kinds_overlap() -> None:
    found = conflicts("me", Claim.of(["a1"], True), [_lease("b", Claim.of(["b1"], True))], NOW)
    assert found and "cluster-scoped kinds" in found[0]


def test_only_live_or_freshly_claimed_shards_count_and_never_the_own_lease() -> None:
    mine = Claim.of(["a1"], True)
    same = Claim.of(["a1"], True)
    assert conflicts("me", mine, [_lease("me", same)], NOW) == []
    left_behind = _lease("old", same, holder=None, renewed=STALE)
    assert conflicts("me", mine, [left_behind], NOW) == []
    expired = _lease("dead", same, renewed=STALE)
    assert conflicts("me", mine, [expired], NOW) == []
    starting = _lease("new", same, holder=None, renewed=STALE, claimed=NOW)
    assert conflicts("me", mine, [starting], NOW)
    unclaimed = client.V1Lease(metadata=client.V1ObjectMeta(name="webhook", namespace="home"),
                               spec=client.V1LeaseSpec(holder_identity="w", renew_time=NOW))
    assert conflicts("me", mine, [unclaimed], NOW) == []


def test_a_claim_reads_back_as_written() -> None:
    for claim in (Claim.of(["b", "a"], False), Claim.of([], True)):
        assert Claim.read(claim.annotations(NOW)) == claim
    assert Claim.read({}) is None
