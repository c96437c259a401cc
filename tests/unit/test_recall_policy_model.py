"""spec.policy.recall as the operator reads it and hands it to the store (sql/0022)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fgentic_governance.api.memory import MemoryScopeSpec, RecallPolicy
from fgentic_governance.memory import ScopeRecord
from tests.support.objects import example


def _record(recall: dict[str, object]) -> ScopeRecord:
    spec = example("MemoryScope")["spec"]
    spec["policy"]["recall"] = recall
    return ScopeRecord.from_spec("ns", "scope", MemoryScopeSpec.model_validate(spec))


def test_the_record_carries_the_policy_as_the_stores_columns() -> None:
    record = _record({"memoryTypes": ["fact", "preference"], "sensitivities": ["normal"],
                      "maxAgeHours": 72})
    assert record.recall_params() == (["fact", "preference"], None, None, ["normal"],
                                      72 * 3600)
    assert _record({}).recall_params() == (None, None, None, None, None)


@pytest.mark.parametrize("recall", [
    {"sourceKinds": ["unknown", "unknown"]},
    {"memoryTypes": []},
    {"confirmationStatuses": ["operator_confirmed"]},
    {"maxAgeHours": 169},
    {"maxAge": 1},
])
def test_a_malformed_policy_does_not_parse(recall: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RecallPolicy.model_validate(recall)
