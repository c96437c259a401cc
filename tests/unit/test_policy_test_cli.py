"""`fgentic-governance test`: offline admission policy suites (docs/policy-testing.md).

The core (``admission.offline``) gives the webhook's own verdict with every live lookup
answered from the setup objects; the CLI runs suites of them with content-free output and
exit codes 0 (all pass), 1 (a test fails) and 2 (unusable input, one line on stderr).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from fgentic_governance.admission.offline import (
    Options,
    Setup,
    UnusableObject,
    denials_of,
    evaluate,
    route_of,
)
from fgentic_governance.admission.policy import AdmissionCode, Denial
from fgentic_governance.admission.review import response
from fgentic_governance.cli import main
from fgentic_governance.schema_version import SCHEMA_VERSION
from tests.support.objects import ROOT

POLICY = ROOT / "examples" / "policy"
SUITE = POLICY / "suite.yaml"
SAMPLES = sorted(p.name for p in POLICY.iterdir() if p.is_dir())
MEMORY_API = "http://fgentic-memory-api.fgentic-system.svc:8083"
OPTIONS = Options(local_homeserver="fgentic.local", memory_api_url=MEMORY_API,
                  memory_model_url=MEMORY_API + "/v1")
SENTINEL = "SENTINEL-5e1f-never-printed"


def docs(code: str, name: str) -> list[dict[str, Any]]:
    path = POLICY / code / name
    return [d for d in yaml.safe_load_all(path.read_text()) if d] if path.is_file() else []


def sample(code: str, name: str) -> dict[str, Any]:
    [doc] = docs(code, name)
    return doc


def setup(code: str, *extra: dict[str, Any]) -> Setup:
    return Setup.of([*docs(code, "setup.yaml"), *extra])


def verdict(obj: Any, world: Setup, options: Options = OPTIONS,
            operation: str = "CREATE") -> list[str]:
    return [f"{d.code.value} at {d.path}" for d in evaluate(obj, world, options, operation)]


# -- the core -------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", SAMPLES)
def test_every_sample_pair_gets_the_webhooks_verdict_offline(code: str) -> None:
    world = setup(code)
    assert verdict(sample(code, "allowed.yaml"), world) == []
    [denial] = evaluate(sample(code, "denied.yaml"), world, OPTIONS)
    assert denial.code == AdmissionCode(code)


def test_scope_gates_are_assumed_only_when_the_suite_says_so() -> None:
    agent = sample("MEMORY_TTL_MISSING", "allowed.yaml")
    world = setup("MEMORY_TTL_MISSING")
    assert verdict(agent, world) == []
    ungated = replace(OPTIONS, assume_gated=False)
    assert verdict(agent, world, ungated) == ["MEMORY_UNGATED at spec.declarative.memory"]
    # Without the assumption the gates are read from the scope's status, as the webhook does.
    [scope] = [d for d in docs("MEMORY_TTL_MISSING", "setup.yaml") if d["kind"] == "MemoryScope"]
    scope = copy.deepcopy(scope)
    scope["metadata"]["generation"] = 1
    scope["status"] = {"storeSchemaVersion": SCHEMA_VERSION, "observedGeneration": 1,
                       "conditions": [{"type": "StoreReady", "status": "True"},
                                      {"type": "ConsentGated", "status": "True"}]}
    assert verdict(agent, setup("MEMORY_TTL_MISSING", scope), ungated) == []


def test_the_default_profile_is_never_gated_even_when_assumed() -> None:
    assert verdict(sample("MEMORY_UNGATED", "denied.yaml"), setup("MEMORY_UNGATED")) == [
        "MEMORY_UNGATED at spec.declarative.memory"]


def test_without_the_memory_api_memory_agents_are_refused() -> None:
    agent = sample("MEMORY_TTL_MISSING", "allowed.yaml")
    assert verdict(agent, setup("MEMORY_TTL_MISSING"), Options()) == [
        "MEMORY_RUNTIME_UNGOVERNED at spec.declarative.memory"]


def test_model_configs_are_checked_only_with_the_model_url() -> None:
    agent = sample("MEMORY_MODEL_UNGOVERNED", "denied.yaml")
    world = setup("MEMORY_MODEL_UNGOVERNED")
    assert verdict(agent, world) == ["MEMORY_MODEL_UNGOVERNED at spec.declarative.modelConfig"]
    unchecked = Options(local_homeserver="fgentic.local", memory_api_url=MEMORY_API)
    assert verdict(agent, world, unchecked) == []


def test_an_update_is_judged_against_the_setups_object() -> None:
    """A ModelConfig a memory-enabled Agent (in the setup) uses cannot be repointed."""
    world = setup("MEMORY_RUNTIME_UNGOVERNED")
    [config] = [d for d in docs("MEMORY_RUNTIME_UNGOVERNED", "setup.yaml")
                if d["kind"] == "ModelConfig" and d["metadata"]["name"] == "default-model-config"]
    repointed = copy.deepcopy(config)
    repointed["spec"]["openAI"]["baseUrl"] = "https://api.openai.com/v1"
    assert verdict(repointed, world, operation="UPDATE") == ["MEMORY_MODEL_UNGOVERNED at spec"]
    assert verdict(config, world, operation="UPDATE") == []


def test_a_pod_update_keeps_a_label_set_at_creation() -> None:
    """The old object of an UPDATE is the setup's: keeping the routed label is admitted."""
    pod = sample("ROUTED_LABEL_RESERVED", "denied.yaml")
    assert verdict(pod, Setup.of([pod]), operation="UPDATE") == []
    assert verdict(pod, Setup.of([sample("ROUTED_LABEL_RESERVED", "allowed.yaml")]),
                   operation="UPDATE") == ["ROUTED_LABEL_RESERVED at metadata.labels"]


def test_an_update_needs_its_old_object_in_the_setup() -> None:
    with pytest.raises(UnusableObject, match="UPDATE"):
        evaluate(sample("FEDERATION_DENIED", "allowed.yaml"), Setup.of([]), OPTIONS, "UPDATE")
    with pytest.raises(UnusableObject, match="operation"):
        evaluate(sample("FEDERATION_DENIED", "allowed.yaml"), Setup.of([]), OPTIONS, "DELETE")


def test_objects_without_a_namespace_are_in_the_suites_namespace() -> None:
    consent = sample("CONSENT_SCOPE_MISSING", "allowed.yaml")
    scope = sample("CONSENT_SCOPE_MISSING", "setup.yaml")
    for doc in (consent, scope):
        del doc["metadata"]["namespace"]
    world = Setup.of([scope], namespace="team-a")
    assert verdict(consent, world, Options(namespace="team-a")) == []
    assert verdict(consent, world, Options(namespace="team-b")) == [
        "CONSENT_SCOPE_MISSING at spec.scopeRef.name"]


def test_a_later_setup_object_replaces_an_earlier_one() -> None:
    agent = sample("MEMORY_TTL_EXCEEDS_RETENTION", "allowed.yaml")  # ttlDays: 3
    [scope] = [d for d in docs("MEMORY_TTL_EXCEEDS_RETENTION", "setup.yaml")
               if d["kind"] == "MemoryScope"]
    shorter = copy.deepcopy(scope)
    shorter["spec"]["policy"]["maxRetentionDays"] = 2
    assert verdict(agent, setup("MEMORY_TTL_EXCEEDS_RETENTION", shorter)) == [
        "MEMORY_TTL_EXCEEDS_RETENTION at spec.declarative.memory.ttlDays"]
    assert verdict(agent, setup("MEMORY_TTL_EXCEEDS_RETENTION", shorter, scope)) == []


@pytest.mark.parametrize("obj", [
    [SENTINEL], SENTINEL, {"kind": "Agent", "metadata": {"name": SENTINEL}},
    {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": SENTINEL}},
    {"apiVersion": "example.com/v1alpha2", "kind": "Agent"},
    {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent", "metadata": [SENTINEL]},
], ids=["list", "string", "no-api-version", "configmap", "other-group", "metadata-list"])
def test_objects_the_webhook_never_reviews_are_unusable(obj: Any) -> None:
    with pytest.raises(UnusableObject) as info:
        route_of(obj)
    assert SENTINEL not in str(info.value)


def test_a_setup_holds_any_object_but_only_our_kinds_of_our_group() -> None:
    Setup.of([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "a"}}])
    with pytest.raises(UnusableObject, match="not a kind of"):
        Setup.of([{"apiVersion": "governance.fgentic.dev/v1alpha1", "kind": "MemoryScop"}])


@pytest.mark.parametrize("code", list(AdmissionCode))
def test_denials_are_read_back_from_the_webhooks_answer(code: AdmissionCode) -> None:
    denials = [Denial(code, "spec.declarative.tools[0].headersFrom[1]", "x-api-key"),
               Denial(code, "spec")]
    assert denials_of(response("u", denials)["response"]) == denials
    assert denials_of(response("u", [])["response"]) == []


async def test_an_offline_review_runs_inside_an_event_loop_too() -> None:
    """Nothing awaits I/O: the review completes without a loop of its own."""
    assert verdict(sample("FEDERATION_DENIED", "denied.yaml"), Setup.of([])) == [
        "FEDERATION_DENIED at spec.subject"]


# -- the CLI ------------------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *suites: Path | str) -> tuple[int, str, str]:
    code = main(["test", *map(str, suites)])
    out, err = capsys.readouterr()
    return code, out, err


def write_suite(tmp_path: Path, suite: Any, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(suite if isinstance(suite, str) else yaml.safe_dump(suite))
    return path


def test_the_example_suite_runs_every_sample_pair(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, SUITE)
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert lines[-1] == f"{2 * len(SAMPLES)} passed, 0 failed"
    assert all(line.startswith("PASS ") for line in lines[:-1])
    names = {line.split(" ", 1)[1].split(":", 1)[0] for line in lines[:-1]}
    assert names == {f"{c}/{k}" for c in SAMPLES for k in ("allowed", "denied")}
    # Each denied sample names its code and path, the shape examples/policy/README.md gives.
    for c in SAMPLES:
        [denied] = [line for line in lines if line.startswith(f"PASS {c}/denied:")]
        assert f"expected deny {c} at " in denied, denied
    suite = yaml.safe_load(SUITE.read_text())
    assert {(t["object"], t.get("setup") == [f"{t['name'].split('/')[0]}/setup.yaml"])
            for t in suite["tests"]} == {
        (f"{c}/{k}.yaml", (POLICY / c / "setup.yaml").is_file())
        for c in SAMPLES for k in ("allowed", "denied")}


def test_the_example_suite_passes_as_a_process() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fgentic_governance.cli", "test", "examples/policy/suite.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"{2 * len(SAMPLES)} passed, 0 failed"
    assert result.stderr == ""


def test_a_wrong_expectation_fails_naming_expected_and_got(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    denied = POLICY / "FORBIDDEN_HEADER" / "denied.yaml"
    suite = write_suite(tmp_path, {"setup": [str(POLICY / "FORBIDDEN_HEADER" / "setup.yaml")],
                                   "tests": [
        {"name": "admits-it", "object": str(denied), "expect": "allow"},
        {"name": "other-code", "object": str(denied), "expect": {"deny": "MEMORY_UNGATED"}},
        {"name": "other-path", "object": str(denied),
         "expect": {"deny": "FORBIDDEN_HEADER", "path": "spec"}},
        {"name": "right", "object": str(denied), "expect": {"deny": "FORBIDDEN_HEADER"}},
    ]})
    code, out, err = run_cli(capsys, suite)
    got = "got deny FORBIDDEN_HEADER at spec.declarative.tools[0].mcpServer.allowedHeaders[1]"
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        f"FAIL admits-it: expected allow, {got}",
        f"FAIL other-code: expected deny MEMORY_UNGATED, {got}",
        f"FAIL other-path: expected deny FORBIDDEN_HEADER at spec, {got}",
        f"PASS right: expected deny FORBIDDEN_HEADER, {got}",
        "1 passed, 3 failed",
    ]
    assert "authorization" not in out.lower()  # the header the denial carries is not printed


def test_output_is_content_free(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent = sample("FORBIDDEN_HEADER", "denied.yaml")
    agent["metadata"]["name"] = SENTINEL.lower()
    agent["spec"]["declarative"]["systemMessage"] = SENTINEL
    agent["spec"]["declarative"]["tools"][0]["mcpServer"]["allowedHeaders"] = [SENTINEL]
    suite = write_suite(tmp_path, {"tests": [{"name": "inline", "object": agent,
                                              "expect": "allow"}]})
    code, out, err = run_cli(capsys, suite)
    assert code == 1
    assert SENTINEL.lower() not in (out + err).lower()
    assert "FORBIDDEN_HEADER at spec.declarative.tools[0].mcpServer.allowedHeaders[0]" in out


def test_several_suites_name_their_file(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    scope = str(POLICY / "FEDERATION_DENIED" / "allowed.yaml")
    one = write_suite(tmp_path, {"settings": {"localHomeserver": "fgentic.local"},
                                 "tests": [{"name": "t", "object": scope, "expect": "allow"}]})
    two = write_suite(tmp_path, {"tests": [{"name": "t", "object": scope, "expect": "allow"}]},
                      "two.yaml")
    code, out, _ = run_cli(capsys, one, two)
    assert code == 1
    assert out.splitlines() == [
        f"PASS {one}: t: expected allow, got allow",
        f"FAIL {two}: t: expected allow, got deny FEDERATION_DENIED at spec.subject",
        "1 passed, 1 failed",
    ]


def test_a_test_may_drop_the_gate_assumption(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    base = POLICY / "MEMORY_TTL_MISSING"
    test = {"setup": [str(base / "setup.yaml")], "object": str(base / "allowed.yaml")}
    suite = write_suite(tmp_path, {
        "settings": {"localHomeserver": "fgentic.local", "memoryApiUrl": MEMORY_API},
        "tests": [{"name": "gated", **test, "expect": "allow"},
                  {"name": "ungated", **test, "assumeGated": False,
                   "expect": {"deny": "MEMORY_UNGATED", "path": "spec.declarative.memory"}}]})
    assert run_cli(capsys, suite)[:2] == (0, "PASS gated: expected allow, got allow\n"
                                             "PASS ungated: expected deny MEMORY_UNGATED at "
                                             "spec.declarative.memory, got deny MEMORY_UNGATED "
                                             "at spec.declarative.memory\n2 passed, 0 failed\n")


ALLOWED = str(POLICY / "FEDERATION_DENIED" / "allowed.yaml")
UNUSABLE: list[tuple[str, Any, dict[str, str], str]] = [
    ("missing-suite", None, {}, "no such file"),
    ("malformed-yaml", f"tests: [{{name: {SENTINEL}\n", {}, "not valid YAML at line"),
    ("unknown-suite-field", {"tests": [], "setttings": {}}, {}, "unknown field 'setttings'"),
    ("unknown-test-field", {"tests": [{"object": ALLOWED, "expect": "allow", "expct": 1}]}, {},
     "tests[0]: unknown field 'expct'"),
    ("unknown-setting", {"settings": {"memoryApi": "x"}, "tests": []}, {},
     "settings: unknown field 'memoryApi'"),
    ("no-tests", {"tests": []}, {}, "tests: not a non-empty list"),
    ("missing-object-file", {"tests": [{"object": "nowhere.yaml", "expect": "allow"}]}, {},
     "nowhere.yaml: no such file"),
    ("bad-object", {"tests": [{"object": "obj.yaml", "expect": "allow"}]},
     {"obj.yaml": f"- {SENTINEL}\n"}, "obj.yaml: not an object"),
    ("unsupported-kind", {"tests": [{"object": "obj.yaml", "expect": "allow"}]},
     {"obj.yaml": f"apiVersion: v1\nkind: ConfigMap\ndata: {{k: {SENTINEL}}}\n"},
     "a kind the webhook does not review"),
    ("two-objects", {"tests": [{"object": "obj.yaml", "expect": "allow"}]},
     {"obj.yaml": "apiVersion: v1\nkind: Pod\n---\napiVersion: v1\nkind: Pod\n"},
     "holds 2 documents"),
    ("bad-setup-object", {"setup": ["s.yaml"], "tests": [{"object": ALLOWED, "expect": "allow"}]},
     {"s.yaml": "apiVersion: v1\nkind: ServiceAccount\n---\nkind: Agent\n"},
     "s.yaml: document 2: no apiVersion or kind"),
    ("unknown-code", {"tests": [{"object": ALLOWED, "expect": {"deny": "NOPE"}}]}, {},
     "expect.deny: not an admission code"),
    ("bad-verdict", {"tests": [{"object": ALLOWED, "expect": "deny"}]}, {},
     "expect: neither allow nor a mapping"),
    ("bad-setting-type", {"settings": {"assumeGated": "yes"}, "tests": []}, {},
     "settings.assumeGated: not a bool"),
    ("update-without-old", {"tests": [{"name": "u", "object": ALLOWED, "operation": "UPDATE",
                                       "expect": "allow"}]}, {},
     "test u: an UPDATE of an object the setup does not hold"),
    ("bad-operation", {"tests": [{"object": ALLOWED, "operation": "DELETE",
                                  "expect": "allow"}]}, {}, "neither CREATE nor UPDATE"),
    ("same-name", {"tests": [{"name": "a", "object": ALLOWED, "expect": "allow"}] * 2}, {},
     "two tests are named a"),
]


@pytest.mark.parametrize(("suite", "files", "reason"), [u[1:] for u in UNUSABLE],
                         ids=[u[0] for u in UNUSABLE])
def test_unusable_input_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], suite: Any, files: dict[str, str],
        reason: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    path = tmp_path / "suite.yaml" if suite is None else write_suite(tmp_path, suite)
    code, out, err = run_cli(capsys, path)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("fgentic-governance test: "), err
    assert reason in err
    assert "Traceback" not in err and SENTINEL not in err


def test_unusable_input_in_a_process_prints_no_traceback(tmp_path: Path) -> None:
    write_suite(tmp_path, "tests:\n  - object: {apiVersion: v1\n")
    result = subprocess.run(
        [sys.executable, "-m", "fgentic_governance.cli", "test", "suite.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "fgentic-governance test: suite.yaml: not valid YAML at line 3, column 1"]


def test_no_test_runs_when_a_later_suite_is_unusable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, SUITE, tmp_path / "missing.yaml")
    assert (code, out) == (2, "")
    assert err.strip().endswith("missing.yaml: no such file")
