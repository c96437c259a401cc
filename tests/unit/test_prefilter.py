"""The prefilter's SQL text and bound values, its fail-closed refusals (before any I/O), and
the plain-Python reference it is tested against.

The prefilter takes only a `contract.VerifiedIdentity`, what `decode_verified_identity` returns
for an X-Fgentic-Identity header that passed every rule; the tests obtain theirs the same way
(`verified`: encode, then decode)."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fgentic_governance import contract
from fgentic_governance.contract import (
    BridgedPrincipal,
    Code,
    ContractError,
    MatrixPrincipal,
    MatrixProjection,
    OAuthProjection,
    VerifiedIdentity,
    load_identity,
)
from fgentic_governance.retrieval.search import corpus, prefilter
from fgentic_governance.retrieval.search.acl_reference import admits

DATA = Path(contract.__file__).parent / "testdata"
MATRIX = load_identity((DATA / "adr0017_matrix_projection.json").read_text())
OAUTH = load_identity((DATA / "adr0017_oauth_projection.json").read_text())
NOW = MATRIX.iat + 1
DIM = corpus.EMBEDDING_DIMENSIONS

A = {"kind": "matrix", "principal": "@alice:org-a.example"}
B = {"kind": "bridged_matrix", "network": "slack", "principal": "@slack-bob:org-a.example"}
G = "partner/org-b/docs"


class NoConnection:
    """Any attribute access fails the test: a refused projection must not reach the driver."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"connection used: {name}")


def _variant(model: Any, **changes: Any) -> Any:
    return load_identity(json.dumps({**model.model_dump(mode="json"), **changes}))


def verified(model: Any, *, now: int = NOW) -> VerifiedIdentity:
    """What the retrieval server holds after decoding the header: the prefilter's only input."""
    return contract.decode_verified_identity([contract.encode_identity(model)], now=now,
                                             agent=None)


V_MATRIX = verified(MATRIX)
V_OAUTH = verified(OAUTH)


def _refused_at_the_boundary(value: Any) -> None:
    # Not a VerifiedIdentity: refused by type, with the code a non-projection always had.
    with pytest.raises(ContractError) as refused:
        prefilter.predicate(value, now=NOW)
    assert refused.value.code is Code.SHAPE_INVALID


# -- the clause ----------------------------------------------------------------------------------


def test_matrix_clause_requires_every_audience_key() -> None:
    where = prefilter.predicate(V_MATRIX, now=NOW)
    assert where.sql == ("(chunks.acl_classification = ANY($1::text[])"
                         " AND chunks.acl_principals @> $2::text[])")
    assert where.args == (["approved_non_public", "public"],
                          ["bridged_matrix slack @slack-bob:org-a.example",
                           "matrix  @alice:org-a.example"])


def test_bridged_caller_uses_the_same_audience_rule() -> None:
    doc = MATRIX.model_dump(mode="json")
    doc.update(kind="bridged_matrix", network="slack", principal="@slack-bob:org-a.example")
    bridged = verified(load_identity(json.dumps(doc)))
    assert prefilter.predicate(bridged, now=NOW) == prefilter.predicate(V_MATRIX, now=NOW)


def test_oauth_clause_is_a_group_overlap_and_ignores_principals() -> None:
    where = prefilter.predicate(V_OAUTH, now=NOW, first=3)
    assert where.sql == ("(chunks.acl_classification = ANY($3::text[])"
                         " AND chunks.acl_groups && $4::text[])")
    assert where.args == (["approved_non_public", "public"], ["partner/org-b/docs"])
    assert "principals" not in where.sql


def test_public_only_projection_binds_only_public() -> None:
    where = prefilter.predicate(verified(_variant(OAUTH, allowed_classifications=["public"])),
                                now=NOW)
    assert where.args[0] == ["public"]


def test_values_are_bound_never_spliced() -> None:
    # Every value lives in args; the SQL text is the same for any projection of a kind.
    other = verified(_variant(OAUTH, groups=["partner/org-b/x", "partner/org-b/y"]))
    assert prefilter.predicate(other, now=NOW).sql == prefilter.predicate(V_OAUTH, now=NOW).sql
    assert "org-b" not in prefilter.predicate(other, now=NOW).sql


def test_principal_key_is_exact_and_refuses_the_separator() -> None:
    assert prefilter.principal_key(MatrixPrincipal(**A)) == "matrix  @alice:org-a.example"
    assert prefilter.principal_key(BridgedPrincipal(**B)) == (
        "bridged_matrix slack @slack-bob:org-a.example")
    forged = MatrixPrincipal.model_construct(kind="matrix", principal="@a b:c")
    with pytest.raises(ValueError, match="separator"):
        prefilter.principal_key(forged)


# -- fail closed ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    None, {}, "", b"", 1, MATRIX.model_dump(), MATRIX.model_dump_json(), MATRIX.audience[0],
    MATRIX.agent, contract.encode_identity(MATRIX),
])
def test_anything_but_a_projection_is_refused(value: Any) -> None:
    _refused_at_the_boundary(value)


@pytest.mark.parametrize("model", [MATRIX, OAUTH], ids=["matrix", "oauth"])
def test_a_valid_but_undecoded_projection_is_refused(model: Any) -> None:
    # A contract model, even a valid one, is not proof that the header was decoded: the type
    # is checked at run time too, whatever a caller's static types claimed.
    _refused_at_the_boundary(model)
    assert prefilter.predicate(verified(model), now=NOW).args


def _construct(model: Any, **changes: Any) -> Any:
    # model_construct skips validation: what a bug or a careless caller could hand over.
    return type(model).model_construct(**{**dict(model), **changes})


@pytest.mark.parametrize("bad", [
    pytest.param(lambda: _construct(MATRIX, audience=()), id="empty-audience"),
    pytest.param(lambda: _construct(MATRIX, groups=("partner/org-b/docs",)),
                 id="matrix-with-groups"),
    pytest.param(lambda: _construct(MATRIX, allowed_classifications=("secret",)),
                 id="unknown-classification"),
    pytest.param(lambda: _construct(MATRIX, allowed_classifications=()), id="no-classification"),
    pytest.param(lambda: _construct(MATRIX, audience=(
        MatrixPrincipal.model_construct(kind="matrix", principal="@bob:org-a.example"),)),
                 id="caller-not-in-audience"),
    pytest.param(lambda: _construct(MATRIX, audience=(
        MatrixPrincipal.model_construct(kind="matrix", principal="alice"),)),
                 id="localpart"),
    pytest.param(lambda: _construct(OAUTH, groups=()), id="oauth-no-groups"),
    pytest.param(lambda: _construct(OAUTH, groups=("partner/org-c/docs",)),
                 id="foreign-partner-group"),
    pytest.param(lambda: _construct(OAUTH, groups=("partner/org-b/docs", "local-group")),
                 id="local-group"),
    pytest.param(lambda: _construct(OAUTH, kind="matrix"), id="mixed-kind"),
    pytest.param(lambda: _construct(MATRIX, v=2), id="version"),
])
def test_unchecked_models_are_refused(bad: Any) -> None:
    # Handed over directly, an unchecked model is refused by type; and the only road to a
    # VerifiedIdentity (encode, then decode) refuses it as well.
    _refused_at_the_boundary(bad())
    with pytest.raises(ContractError):
        verified(bad())


def test_mutated_frozen_model_is_refused() -> None:
    model = _variant(OAUTH)
    object.__setattr__(model, "groups", ())
    _refused_at_the_boundary(model)
    with pytest.raises(ContractError):
        verified(model)


@pytest.mark.parametrize(("base", "field", "code"), [
    (OAUTH, "groups", Code.GROUPS_INVALID),
    (MATRIX, "audience", Code.AUDIENCE_INVALID),
])
def test_predicate_guards_hold_even_for_a_verified_value_tampered_in_place(
    base: Any, field: str, code: Code
) -> None:
    # Validation is not repeated, but the guards that keep the clause from widening are: a
    # decoded model emptied through object.__setattr__ still builds no clause.
    tampered = verified(base)
    object.__setattr__(tampered.identity, field, ())
    with pytest.raises(ContractError) as refused:
        prefilter.predicate(tampered, now=NOW)
    assert refused.value.code is code


def test_subclass_with_extra_field_is_refused() -> None:
    class Wider(OAuthProjection):
        zz_extra: str = "x"

    wider = Wider.model_construct(**dict(OAUTH), zz_extra="x")
    _refused_at_the_boundary(wider)
    with pytest.raises(TypeError):
        VerifiedIdentity(wider, seal=object())


def test_a_verified_identity_cannot_be_forged_copied_or_changed() -> None:
    with pytest.raises(TypeError, match="decode_verified_identity"):
        VerifiedIdentity(MATRIX, seal=object())
    with pytest.raises(TypeError):
        type("Forged", (VerifiedIdentity,), {})
    with pytest.raises(AttributeError):
        V_MATRIX._identity = OAUTH  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del V_MATRIX._identity
    with pytest.raises(TypeError):
        pickle.dumps(V_MATRIX)
    assert copy.copy(V_MATRIX) is V_MATRIX
    assert copy.deepcopy(V_MATRIX) is V_MATRIX
    assert V_MATRIX.identity == MATRIX


def test_a_verified_identity_shows_no_content() -> None:
    assert repr(V_MATRIX) == "VerifiedIdentity(kind='matrix')"
    assert repr(V_OAUTH) == "VerifiedIdentity(kind='oidc_client')"
    with pytest.raises(TypeError) as forged:
        VerifiedIdentity(MATRIX, seal=object())
    assert "alice" not in str(forged.value)


@pytest.mark.parametrize(("now", "code"), [(MATRIX.exp, Code.EXPIRED),
                                           (MATRIX.exp + 1, Code.EXPIRED),
                                           (MATRIX.iat - 31, Code.NOT_YET_VALID)])
def test_expired_or_future_projection_is_refused(now: int, code: Code) -> None:
    # Decoded while valid; the window is checked again at the call's `now`.
    with pytest.raises(ContractError) as refused:
        prefilter.predicate(V_MATRIX, now=now)
    assert refused.value.code is code


def test_default_clock_refuses_the_expired_fixture() -> None:
    # No `now` means the host clock; the fixture's 10-minute window (2026-07-15) is not now,
    # so whichever side of it the clock is on, the projection must be refused.
    with pytest.raises(ContractError):
        prefilter.predicate(V_MATRIX)


async def test_search_and_count_refuse_before_touching_the_connection() -> None:
    conn: Any = NoConnection()
    with pytest.raises(ContractError):
        await prefilter.search(conn, _construct(MATRIX, audience=()), [0.0] * DIM, 10, now=NOW)
    with pytest.raises(ContractError):
        await prefilter.count(conn, {"kind": "oidc_client"}, now=NOW)
    with pytest.raises(ContractError):
        await prefilter.count(conn, MATRIX, now=NOW)
    with pytest.raises(ContractError):
        await prefilter.search(conn, V_MATRIX, [0.0] * DIM, 10, now=MATRIX.exp)
    hollow = verified(MATRIX)
    object.__setattr__(hollow.identity, "audience", ())
    with pytest.raises(ContractError):
        await prefilter.search(conn, hollow, [0.0] * DIM, 10, now=NOW)


@pytest.mark.parametrize("k", [0, -1, prefilter.MAX_K + 1, True, 2.0, "10"])
async def test_k_is_bounded(k: Any) -> None:
    with pytest.raises(ValueError, match="k must be"):
        await prefilter.search(NoConnection(), V_MATRIX, [0.0] * DIM, k, now=NOW)


@pytest.mark.parametrize("embedding", [[0.0] * (DIM - 1), [0.0] * (DIM + 1),
                                       [float("nan")] + [0.0] * (DIM - 1),
                                       [float("inf")] + [0.0] * (DIM - 1)])
async def test_embedding_is_checked(embedding: list[float]) -> None:
    with pytest.raises(ValueError, match="embedding"):
        await prefilter.search(NoConnection(), V_MATRIX, embedding, 10, now=NOW)


# -- the reference -------------------------------------------------------------------------------


def _acl(principals: Any = None, groups: Any = None, classification: Any = "public") -> Any:
    return {"classification": classification, "allowed_principals": principals,
            "allowed_groups": groups}


@pytest.mark.parametrize(("metadata", "matrix", "oauth"), [
    (_acl([A, B], [G]), True, True),
    (_acl([B, A, {"kind": "matrix", "principal": "@carol:x"}], [G, "partner/org-c/x"]),
     True, True),
    (_acl([A, B], [G], "approved_non_public"), True, True),
    (_acl([A], [G]), False, True),                              # partial audience
    (_acl([A, {**B, "extra": 1}], []), False, False),           # superset object
    (_acl([{**A, "network": "slack"}, B], None), False, False),
    (_acl([A, {"kind": "matrix", "principal": B["principal"]}], None), False, False),
    (_acl([A, B], ["partner/org-b/doc"]), True, False),          # prefix group
    (_acl([A, B], None), True, False),                           # principals alone (OAuth)
    (_acl([], [G]), False, True),                                # group alone (Matrix)
    (_acl([A, B], [G], "restricted"), False, False),
    (_acl([A, B], [G], None), False, False),
    (_acl([A, B], [G], ["public"]), False, False),
    (_acl({"0": A, "1": B}, {G: 1}), False, False),
    (_acl([A, B], G), True, False),
    (_acl([{**A, "principal": True}, B], [True]), False, False),
    (None, False, False),
    ([A, B, G], False, False),
    ("public", False, False),
    ({}, False, False),
])
def test_reference_semantics(metadata: Any, matrix: bool, oauth: bool) -> None:
    assert admits(MATRIX, metadata) is matrix
    assert admits(OAUTH, metadata) is oauth


def test_reference_respects_the_classification_ceiling() -> None:
    public_only: Any = _variant(OAUTH, allowed_classifications=["public"])
    assert isinstance(public_only, OAuthProjection)
    assert admits(public_only, _acl(None, [G], "public"))
    assert not admits(public_only, _acl(None, [G], "approved_non_public"))
    assert isinstance(MATRIX, MatrixProjection)


@settings(max_examples=300)
@given(small=st.integers(min_value=0, max_value=10**9), more=st.integers(min_value=0,
                                                                         max_value=10**9))
def test_a_bucket_walk_keeps_more_candidates_the_larger_its_graph(small: int,
                                                                  more: int) -> None:
    """The bucket path's ef_search: never below pgvector's default, never past its bound,
    and a larger bucket never walks with fewer candidates than a smaller one."""
    low, high = corpus.bucket_ef_search(small), corpus.bucket_ef_search(small + more)
    assert corpus.EF_SEARCH_DEFAULT <= low <= high <= corpus.EF_SEARCH_MAX


def test_a_bucket_walk_grows_from_the_default_to_the_bound() -> None:
    assert corpus.bucket_ef_search(corpus.EXACT_MAX_ROWS + 1) == corpus.EF_SEARCH_DEFAULT
    assert corpus.bucket_ef_search(100 * corpus.BUCKET_ROWS_PER_EF) == 100
    assert corpus.bucket_ef_search(10**9) == corpus.EF_SEARCH_MAX
