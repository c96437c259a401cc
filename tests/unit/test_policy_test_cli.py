"""`fgentic-governance test`: offline admission policy suites (docs/policy-testing.md).

The core (``admission.offline``) gives the webhook's own verdict with every live lookup
answered from the setup objects; the CLI runs suites of them with content-free output and
exit codes 0 (all pass), 1 (a test fails) and 2 (unusable input, one line on stderr).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml

from fgentic_governance.admission.guidance import GUIDANCE
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
from fgentic_governance.cli.policytest import options_of
from fgentic_governance.schema_version import SCHEMA_VERSION
from tests.support.objects import ROOT

POLICY = ROOT / "examples" / "policy"
SUITE = POLICY / "suite.yaml"
SAMPLES = sorted(p.name for p in POLICY.iterdir() if p.is_dir())
MEMORY_API = "http://fgentic-memory-api.fgentic-system.svc:8083"
OPTIONS = Options(local_homeserver="fgentic.local", memory_api_url=MEMORY_API,
                  memory_model_url=MEMORY_API + "/v1",
                  appservice=options_of(yaml.safe_load(SUITE.read_text())["settings"],
                                        "settings").appservice)
"""The samples' webhook (the suite's settings: one appservice-namespace registry)."""
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
    fixed = f"{got}: {GUIDANCE[AdmissionCode.FORBIDDEN_HEADER]}"  # a failing line says how
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        f"FAIL admits-it: expected allow, {fixed}",
        f"FAIL other-code: expected deny MEMORY_UNGATED, {fixed}",
        f"FAIL other-path: expected deny FORBIDDEN_HEADER at spec, {fixed}",
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
        f"FAIL {two}: t: expected allow, got deny FEDERATION_DENIED at spec.subject: "
        f"{GUIDANCE[AdmissionCode.FEDERATION_DENIED]}",
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


# -- manifests, directories, JSON and JUnit (issue 37 item 9) ---------------------------------

BOUND = POLICY / "IDENTITY_HEADER_UNBOUND"
CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
              "data": {"k": SENTINEL}}
UNBOUND_FIX = f"IDENTITY_HEADER_UNBOUND at spec.declarative.tools[0].mcpServer.allowedHeaders[0]" \
    f": {GUIDANCE[AdmissionCode.IDENTITY_HEADER_UNBOUND]}"


def multi_doc(tmp_path: Path, *objects: Any, name: str = "manifests.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(objects))
    return path


def _gitops(tmp_path: Path) -> Path:
    """A GitOps file: the binding, the Agent it binds, another Agent sending the carrier to a
    server no binding names (with a secret-looking header value), and a ConfigMap."""
    denied = sample("IDENTITY_HEADER_UNBOUND", "denied.yaml")
    denied["metadata"]["name"] = "helper"
    denied["spec"]["declarative"]["systemMessage"] = SENTINEL
    return multi_doc(tmp_path, *docs("IDENTITY_HEADER_UNBOUND", "setup.yaml"),
                     sample("IDENTITY_HEADER_UNBOUND", "allowed.yaml"), denied, CONFIG_MAP)


def test_a_multi_document_manifest_is_judged_object_by_object_among_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _gitops(tmp_path)
    code, out, err = run_cli(capsys, path)
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        f"PASS {path}#1 RetrievalBinding: expected allow, got allow",
        f"PASS {path}#2 Agent: expected allow, got allow",  # its binding is in the same file
        f"FAIL {path}#3 Agent: expected allow, got deny {UNBOUND_FIX}",
        "2 passed, 1 failed, 1 not reviewed (kinds the webhook does not review)",
    ]
    assert SENTINEL not in out


def test_cross_object_rules_read_every_given_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent = multi_doc(tmp_path, sample("IDENTITY_HEADER_UNBOUND", "allowed.yaml"),
                      name="agents/retriever.yaml")
    code, out, _ = run_cli(capsys, agent)
    assert code == 1 and "IDENTITY_HEADER_UNBOUND at " in out  # alone: no binding
    code, out, _ = run_cli(capsys, agent, BOUND / "setup.yaml")
    assert code == 0, out
    assert out.splitlines()[-1] == "2 passed, 0 failed"


def test_a_list_and_a_directory_hold_manifests_and_suites(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    listed = {"apiVersion": "v1", "kind": "List",
              "items": [*docs("IDENTITY_HEADER_UNBOUND", "setup.yaml"),
                        sample("IDENTITY_HEADER_UNBOUND", "allowed.yaml")]}
    multi_doc(repo, listed, name="platform/all.yml")
    multi_doc(repo, CONFIG_MAP, name="platform/config.yaml")
    (repo / "README.md").write_text("not read\n")
    # A suite in the tree runs as a suite; the files it names are not manifests.
    multi_doc(repo, sample("FORBIDDEN_HEADER", "denied.yaml"), name="tests/denied.yaml")
    multi_doc(repo, *docs("FORBIDDEN_HEADER", "setup.yaml"), name="tests/setup.yaml")
    write_suite(repo / "tests", {"setup": ["setup.yaml"], "tests": [
        {"name": "refused", "object": "denied.yaml", "expect": {"deny": "FORBIDDEN_HEADER"}}]})
    code, out, err = run_cli(capsys, repo)
    all_yml = repo / "platform" / "all.yml"
    assert (code, err) == (0, ""), out
    assert out.splitlines() == [
        f"PASS {repo / 'tests' / 'suite.yaml'}: refused: expected deny FORBIDDEN_HEADER, got "
        "deny FORBIDDEN_HEADER at spec.declarative.tools[0].mcpServer.allowedHeaders[1]",
        f"PASS {all_yml}#1.items[0] RetrievalBinding: expected allow, got allow",
        f"PASS {all_yml}#1.items[1] Agent: expected allow, got allow",
        "3 passed, 0 failed, 1 not reviewed (kinds the webhook does not review)",
    ]


def test_manifests_take_the_webhooks_settings_from_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = multi_doc(tmp_path, *docs("MEMORY_TTL_MISSING", "setup.yaml"),
                     sample("MEMORY_TTL_MISSING", "allowed.yaml"))
    code, out, _ = run_cli(capsys, path)
    assert code == 1 and "MEMORY_RUNTIME_UNGOVERNED at " in out  # no memory API: refused
    flags = ["--local-homeserver", "fgentic.local", "--memory-api-url", MEMORY_API,
             "--memory-model-url", MEMORY_API + "/v1"]
    assert main(["test", *flags, str(path)]) == 0
    assert main(["test", *flags, "--no-assume-gated", str(path)]) == 1
    assert "MEMORY_UNGATED at spec.declarative.memory" in capsys.readouterr().out


def test_json_output_carries_each_verdict_with_what_to_change(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _gitops(tmp_path)
    code, out, err = run_cli(capsys, "--output", "json", path)
    assert (code, err) == (1, "")
    found = json.loads(out)
    assert found["summary"] == {"passed": 2, "failed": 1, "notReviewed": 1}
    assert [(r["name"], r["passed"]) for r in found["results"]] == [
        (f"{path}#1 RetrievalBinding", True), (f"{path}#2 Agent", True),
        (f"{path}#3 Agent", False)]
    failed = found["results"][2]
    assert failed["group"] == "manifests" and failed["expected"] == "allow"
    assert failed["denials"] == [{
        "code": "IDENTITY_HEADER_UNBOUND",
        "path": "spec.declarative.tools[0].mcpServer.allowedHeaders[0]",
        "fix": GUIDANCE[AdmissionCode.IDENTITY_HEADER_UNBOUND]}]
    assert SENTINEL not in out


def test_junit_output_is_valid_xml_with_a_failure_per_failing_test(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path, {"tests": [
        {"name": 'odd <&"> name', "object": str(POLICY / "FORBIDDEN_HEADER" / "denied.yaml"),
         "expect": "allow"}]})
    path = _gitops(tmp_path)
    code, out, err = run_cli(capsys, "-o", "junit", suite, path)
    assert (code, err) == (1, "")
    root = ElementTree.fromstring(out.encode())
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("4", "2", "1")
    suites = root.findall("testsuite")
    assert [(s.get("name"), s.get("tests"), s.get("failures")) for s in suites] == [
        (str(suite), "1", "1"), ("manifests", "3", "1")]
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {'odd <&"> name', f"{path}#1 RetrievalBinding", f"{path}#2 Agent",
                          f"{path}#3 Agent"}
    assert cases[f"{path}#2 Agent"].find("failure") is None
    failure = cases[f"{path}#3 Agent"].find("failure")
    assert failure is not None
    assert failure.get("message") == ("expected allow, got deny IDENTITY_HEADER_UNBOUND at "
                                      "spec.declarative.tools[0].mcpServer.allowedHeaders[0]")
    assert failure.text == UNBOUND_FIX
    odd = cases['odd <&"> name'].find("failure")
    assert odd is not None and "FORBIDDEN_HEADER at " in (odd.text or "")
    assert SENTINEL not in out


def test_manifests_in_a_pipeline_as_a_process(tmp_path: Path) -> None:
    path = _gitops(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "fgentic_governance.cli", "test", "--output", "junit",
         path.name], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert (result.returncode, result.stderr) == (1, "")
    assert ElementTree.fromstring(result.stdout.encode()).get("failures") == "1"
    allowed = subprocess.run(
        [sys.executable, "-m", "fgentic_governance.cli", "test", "--output", "json",
         str(BOUND / "setup.yaml"), str(BOUND / "allowed.yaml")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert (allowed.returncode, allowed.stderr) == (0, "")
    assert json.loads(allowed.stdout)["summary"] == {"passed": 2, "failed": 0,
                                                     "notReviewed": 0}


@pytest.mark.parametrize(("files", "given", "reason"), [
    ({"m.yaml": f"apiVersion: v1\nkind: ConfigMap\n---\n- {SENTINEL}\n"}, "m.yaml",
     "m.yaml#2: not an object"),
    ({"m.yaml": "apiVersion: v1\nkind: List\nitems: [{kind: Agent}]\n"}, "m.yaml",
     "m.yaml#1.items[0]: no apiVersion or kind"),
    ({"sub/notes.txt": "x\n"}, "sub", "sub: a directory without a *.yaml or *.yml file"),
], ids=["not-an-object", "list-item", "empty-directory"])
def test_unusable_manifests_exit_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str], given: str,
        reason: str) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    code, out, err = run_cli(capsys, "--output", "junit", tmp_path / given)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and reason in err and SENTINEL not in err, err
