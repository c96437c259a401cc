"""Issue 27: input a subcommand cannot use ends in one line on stderr, never a traceback.

Each case runs in-process (``main``) and as the console script's module (a subprocess), from
a directory of prepared files, without Kubernetes credentials (no KUBECONFIG, an empty HOME,
not in a Pod). The line is ``fgentic-governance <command>: <what is wrong>``; it names the flag
or path and never what a file holds.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fgentic_governance.cli import main, version
from fgentic_governance.cli.errors import InputError
from fgentic_governance.cli.inputs import http_url, https_url

SECRET = "s3cret-password-in-a-file"
"""Written into the DSN and kubeconfig files: it must never reach the output."""
URL = "https://webhook.example:9443"
NO_CONTEXT = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [],
              "contexts": [], "preferences": {}, "token": SECRET}


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate(key: ec.EllipticCurvePrivateKey) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fgentic test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working directory every case runs in (names below are relative to it)."""
    root = tmp_path_factory.mktemp("cli-errors")
    key, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate(key)
    (root / "home").mkdir()
    (root / "ca.pem").write_bytes(ca)
    (root / "not-pem.txt").write_text(f"this is not a certificate {SECRET}\n")
    (root / "ca-and-key.pem").write_bytes(ca + _key_pem(key))
    (root / "broken-cert.pem").write_text("-----BEGIN CERTIFICATE-----\nAAAA\n"
                                          "-----END CERTIFICATE-----\n")
    (root / "broken.yaml").write_text(f"kind: RetrievalBinding\nspec: [{SECRET}\n")
    (root / "list.yaml").write_text(f"- {SECRET}\n- two\n")
    (root / "invalid-binding.yaml").write_text(yaml.safe_dump({
        "apiVersion": "governance.fgentic.dev/v1alpha1", "kind": "RetrievalBinding",
        "metadata": {"namespace": "team-a", "name": "docs"},
        "spec": {"agent": {"name": SECRET}, "unknown": SECRET}}))
    (root / "no-context.yaml").write_text(yaml.safe_dump(NO_CONTEXT))
    (root / "dsn").write_text(f"postgresql://fgentic:{SECRET}@127.0.0.1:1/none\n")
    (root / "empty-dsn").write_text("\n")
    (root / "not-a-dsn").write_text(f"host=db password={SECRET}\n")
    (root / "bad-port-dsn").write_text(f"postgresql://fgentic:{SECRET}@db:port/none\n")
    (root / "standby-dsn").write_text(
        f"postgresql://fgentic:{SECRET}@db-1:5432,db-2:5432/none?target_session_attrs=any\n")
    (root / "token").write_text("t" * 40)
    (root / "empty-tls").mkdir()
    for name, cert, private in (("tls", ca, key), ("mismatched-tls", ca, other)):
        (root / name).mkdir()
        (root / name / "tls.crt").write_bytes(cert)
        (root / name / "tls.key").write_bytes(_key_pem(private))
    return root


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    says: str
    """What the one line says after ``fgentic-governance <command>: ``."""
    code: int = 2


CONTROL_API = ("control-api", "--store-dsn-file", "dsn", "--token-file", "token",
               "--local-homeserver", "example.org", "--bot-mxid", "@bot:example.org",
               "--ghost-template", "@agent-{namespace}-{name}:{server}")
WEBHOOK_CA = ("render", "webhook-config", "--url", URL, "--ca-file")
OFFBOARD = ("offboard", "@alice:example.org")
STATUS = ("memory", "status", "team-a/alice", "--store-dsn-file")
MEMORY_API = ("memory-api", "--upstream", "http://kagent:8083", "--local-homeserver",
              "example.org", "--store-dsn-file")

CASES: dict[str, Case] = {
    # 1. a missing input file
    "missing-binding-file": Case(("render", "retrievalbinding", "absent.yaml"),
                                 "render retrievalbinding: absent.yaml: no such file"),
    "missing-ca-file": Case((*WEBHOOK_CA, "absent.pem"),
                            "render webhook-config: --ca-file absent.pem: no such file"),
    "missing-jwks-file": Case(("render", "retrievalbinding", "list.yaml", "--jwks-file", "absent"),
                              "render retrievalbinding: --jwks-file absent: no such file"),
    "missing-corpus-file": Case(("corpus", "load", "absent.jsonl", "--store-dsn-file", "dsn"),
                                "corpus load: absent.jsonl: no such file", code=1),
    # 2. malformed YAML
    "malformed-yaml": Case(("render", "retrievalbinding", "broken.yaml"),
                           "render retrievalbinding: broken.yaml: not valid YAML at line 3, "
                           "column 1"),
    "invalid-binding": Case(("render", "retrievalbinding", "invalid-binding.yaml"),
                            "render retrievalbinding: invalid-binding.yaml: team-a/docs: not a "
                            "valid RetrievalBinding: spec."),
    "no-binding": Case(("render", "retrievalbinding", "list.yaml"),
                       "render retrievalbinding: list.yaml: no RetrievalBinding in it"),
    # 3. a missing kubeconfig
    "missing-kubeconfig": Case((*OFFBOARD, "--kubeconfig", "absent"),
                               "offboard: --kubeconfig absent: no such file"),
    "no-credentials-offboard": Case(OFFBOARD, "offboard: no usable Kubernetes credentials"),
    "no-credentials-detach": Case(("detach",), "detach: no usable Kubernetes credentials"),
    "missing-kubeconfig-memory": Case((*STATUS, "dsn", "--kubeconfig", "absent"),
                                      "memory status: --kubeconfig absent: no such file"),
    # 4. a malformed kubeconfig
    "kubeconfig-not-yaml": Case((*OFFBOARD, "--kubeconfig", "broken.yaml"),
                                "offboard: --kubeconfig broken.yaml: not valid YAML at line 3"),
    "kubeconfig-not-mapping": Case(("detach", "--kubeconfig", "list.yaml"),
                                   "detach: --kubeconfig list.yaml: not a kubeconfig"),
    "kubeconfig-no-context": Case((*OFFBOARD, "--kubeconfig", "no-context.yaml"),
                                  "offboard: --kubeconfig no-context.yaml: not a usable "
                                  "kubeconfig (ConfigException)"),
    "kubeconfig-no-context-memory": Case((*STATUS, "dsn", "--kubeconfig", "no-context.yaml"),
                                         "memory status: --kubeconfig no-context.yaml: not a "
                                         "usable kubeconfig"),
    # 5. an http:// webhook URL
    "http-url": Case(("render", "webhook-config", "--url", "http://webhook.example",
                      "--ca-file", "ca.pem"),
                     "render webhook-config: --url: the scheme is http, not https"),
    # 6. a URL without a scheme
    "schemeless-url": Case(("render", "webhook-config", "--url", "webhook.example:9443",
                            "--ca-file", "ca.pem"), "render webhook-config: --url: no scheme"),
    "userinfo-url": Case(("render", "webhook-config", "--url", f"https://u:{SECRET}@h",
                          "--ca-file", "ca.pem"),
                         "render webhook-config: --url: user information is not allowed"),
    # 7. a CA file that is not PEM
    "ca-not-pem": Case((*WEBHOOK_CA, "not-pem.txt"),
                       "render webhook-config: --ca-file not-pem.txt: not a PEM certificate"),
    "ca-with-key": Case((*WEBHOOK_CA, "ca-and-key.pem"),
                        "render webhook-config: --ca-file ca-and-key.pem: holds a private key"),
    "ca-broken-block": Case((*WEBHOOK_CA, "broken-cert.pem"),
                            "render webhook-config: --ca-file broken-cert.pem: a certificate "
                            "block does not parse"),
    # 8. a missing or unusable DSN file (not STORE_UNAVAILABLE)
    "missing-dsn-status": Case((*STATUS, "absent-dsn", "--no-kube"),
                               "memory status: --store-dsn-file absent-dsn: no such file"),
    "missing-dsn-list": Case(("memory", "list-scopes", "--store-dsn-file", "absent-dsn"),
                             "memory list-scopes: --store-dsn-file absent-dsn: no such file"),
    "missing-dsn-erase": Case(("memory", "erase-scope", "team-a/alice", "--store-dsn-file",
                               "absent-dsn"),
                              "memory erase-scope: --store-dsn-file absent-dsn: no such file"),
    "dsn-directory": Case((*STATUS, "home", "--no-kube"),
                          "memory status: --store-dsn-file home: is a directory"),
    "dsn-empty": Case((*STATUS, "empty-dsn", "--no-kube"),
                      "memory status: --store-dsn-file empty-dsn: empty"),
    "dsn-not-uri": Case((*STATUS, "not-a-dsn", "--no-kube"),
                        "memory status: --store-dsn-file not-a-dsn: not a PostgreSQL URI"),
    "dsn-bad-port": Case((*STATUS, "bad-port-dsn", "--no-kube"),
                         "memory status: --store-dsn-file bad-port-dsn: a port in the URI"),
    # Every store call goes to the primary (memory/dsn.py): another attribute is refused.
    "dsn-standby": Case((*STATUS, "standby-dsn", "--no-kube"),
                        "memory status: --store-dsn-file standby-dsn: target_session_attrs "
                        "must be read-write"),
    "missing-dsn-detach": Case(("detach", "--store-dsn-file", "absent-dsn"),
                               "detach: --store-dsn-file absent-dsn: no such file"),
    "missing-dsn-corpus": Case(("corpus", "stats", "--store-dsn-file", "absent-dsn"),
                               "corpus stats: --store-dsn-file absent-dsn: no such file", code=1),
    "detach-deployment": Case(("detach", "--operator-deployment", "operator"),
                              "detach: --operator-deployment must be NAMESPACE/NAME"),
    "detach-lease": Case(("detach", "--operator-lease", "ns/a/b"),
                         "detach: --operator-lease must be NAMESPACE/NAME"),
    # servers, stopped before they start
    "operator-kubeconfig": Case(("operator", "--kubeconfig", "absent"),
                                "operator: --kubeconfig absent: no such file"),
    "operator-dsn": Case(("operator", "--kubeconfig", "no-context.yaml", "--store-dsn-file",
                          "absent-dsn"), "operator: --store-dsn-file absent-dsn: no such file"),
    "control-api-token": Case((*CONTROL_API[:4], "absent-token", *CONTROL_API[5:]),
                              "control-api: --token-file absent-token: no such file"),
    "control-api-template": Case((*CONTROL_API[:-1], "@agent-{}:{server}"),
                                 "control-api: --ghost-template: use only {namespace}"),
    "memory-api-dsn": Case((*MEMORY_API, "absent-dsn"),
                           "memory-api: --store-dsn-file absent-dsn: no such file"),
    "webhook-no-pair": Case(("webhook", "--tls-dir", "empty-tls"),
                            "webhook: --tls-dir empty-tls: tls.crt: no such file"),
    "webhook-mismatched-pair": Case(("webhook", "--tls-dir", "mismatched-tls"),
                                    "webhook: --tls-dir mismatched-tls: tls.crt and tls.key are "
                                    "not a matching PEM certificate"),
    "webhook-client-ca": Case(("webhook", "--tls-dir", "tls", "--client-ca-file", "not-pem.txt"),
                              "webhook: --client-ca-file not-pem.txt: not a PEM certificate"),
    "webhook-audit-lease": Case(("webhook", "--tls-dir", "tls", "--audit-lease", "audit"),
                                "webhook: --audit-lease audit: expected NAMESPACE/NAME"),
    "projector-config": Case(("projector", "--config", "absent.yaml"),
                             "projector: --config absent.yaml: no such file"),
    # Issue 37: a command's own refusal carries the prefix too
    "offboard-invalid-spec": Case(("offboard", "alice"),
                                  "offboard: INVALID_SPEC: a complete MXID"),
    "model-routes-refused": Case(("render", "memory-model-routes", "--agent", "alice",
                                  "--upstream", "kagent:8083"),
                                 "render memory-model-routes: refused: --agent must be "
                                 "NAMESPACE/NAME"),
}
OUTAGES: dict[str, Case] = {
    # Issue 37: the store unreachable ("dsn" names a closed port) is an outage, exit 1 as for
    # the API server, never 2 (which says the input must change); the line has the prefix.
    "memory-status": Case((*STATUS, "dsn", "--no-kube"),
                          "memory status: refused: STORE_UNAVAILABLE", code=1),
    "memory-list-scopes": Case(("memory", "list-scopes", "--store-dsn-file", "dsn"),
                               "memory list-scopes: refused: STORE_UNAVAILABLE", code=1),
    "memory-erase-scope": Case(("memory", "erase-scope", "team-a/alice", "--store-dsn-file",
                                "dsn", "--no-kube"),
                               "memory erase-scope: refused: STORE_UNAVAILABLE", code=1),
    "corpus-stats": Case(("corpus", "stats", "--store-dsn-file", "dsn"),
                         "corpus stats: the corpus database is unavailable (", code=1),
}
SUBPROCESS_ONLY: dict[str, Case] = {
    # These reach a server's own start-up (logging, event loop): not run in the test process.
    "operator-no-credentials": Case(("operator",), "operator: no usable Kubernetes credentials"),
    "webhook-kubeconfig": Case(("webhook", "--tls-dir", "tls", "--kubeconfig", "no-context.yaml"),
                               "webhook: --kubeconfig no-context.yaml: not a usable kubeconfig"),
    "memory-api-no-credentials": Case((*MEMORY_API, "dsn"),
                                      "memory-api: no usable Kubernetes credentials"),
    "retrieval-server-config": Case(("retrieval-server", "--config", "broken.yaml",
                                     "--store-dsn-file", "dsn", "--embeddings-url", "http://e",
                                     "--embeddings-model", "m"),
                                    "retrieval-server: --config: "),
    # Issue 37: a retrieval server whose embeddings endpoint it could never call does not
    # start (before, it listened and never became ready; a subprocess bounds that here).
    "embeddings-ftp": Case(("retrieval-server", "--agent", "team-a/docs", "--tool", "search",
                            "--store-dsn-file", "dsn", "--embeddings-url",
                            "ftp://embeddings.example/v1", "--embeddings-model", "m",
                            "--port", "0"),
                           "retrieval-server: --embeddings-url: the scheme is ftp, not http "
                           "or https"),
    "embeddings-no-scheme": Case(("retrieval-server", "--agent", "team-a/docs", "--tool", "s",
                                  "--store-dsn-file", "dsn", "--embeddings-url",
                                  "//embeddings.example/v1", "--embeddings-model", "m",
                                  "--port", "0"),
                                 "retrieval-server: --embeddings-url: no scheme"),
}


def _env(files: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}}
    return {**env, "HOME": str(files / "home")}


@pytest.fixture
def offline(files: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process as the subprocess runs: in ``files``, without Kubernetes credentials."""
    from kubernetes.config import kube_config

    monkeypatch.chdir(files)
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(files / "home"))
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION",
                        str(files / "home" / ".kube" / "config"))
    yield files


def _check(case: Case, code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err
    assert SECRET not in out + err
    assert "STORE_UNAVAILABLE" not in err
    assert code == case.code, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"fgentic-governance {case.says}"), lines[0]
    assert out == ""


@pytest.mark.parametrize("name", list(CASES))
def test_in_process(name: str, offline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[name]
    code = main(list(case.argv))
    captured = capsys.readouterr()
    _check(case, code, captured.out, captured.err)


@pytest.mark.parametrize("name", [*CASES, *SUBPROCESS_ONLY])
def test_as_a_subprocess(name: str, files: Path) -> None:
    case = CASES.get(name) or SUBPROCESS_ONLY[name]
    done = subprocess.run([sys.executable, "-m", "fgentic_governance.cli", *case.argv],
                          cwd=files, env=_env(files), capture_output=True, text=True,
                          timeout=60, check=False)
    _check(case, done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("name", list(OUTAGES))
def test_an_unreachable_store_is_an_outage_not_unusable_input(
        name: str, offline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = OUTAGES[name]
    code = main(list(case.argv))
    captured = capsys.readouterr()
    assert (code, captured.out) == (case.code, ""), captured.err
    assert "Traceback" not in captured.err and SECRET not in captured.err
    assert len(captured.err.splitlines()) == 1, captured.err
    assert captured.err.startswith(f"fgentic-governance {case.says}"), captured.err


@pytest.mark.parametrize(("url", "says"), [
    ("ftp://h/v1", "the scheme is ftp"), ("file:///etc/passwd", "the scheme is file"),
    ("h:8080/v1", "the scheme is h"), ("//h/v1", "no scheme"), ("", "no scheme"),
    ("http:///v1", "no host"), ("http://h:99999/v1", "not a URL"),
])
def test_embeddings_urls_are_http_or_https_with_a_host(url: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as refused:
        http_url(url, "--embeddings-url")
    assert str(refused.value).startswith("--embeddings-url: ")


@pytest.mark.parametrize("url", ["http://gateway:4001/v1/embeddings", "HTTPS://h/v1",
                                 "https://[::1]:8443/v1?api-version=1"])
def test_http_and_https_embeddings_urls_are_accepted(url: str) -> None:
    assert http_url(url, "--embeddings-url") == url


def test_a_valid_webhook_config_still_renders(
        offline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*WEBHOOK_CA, "ca.pem"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert {hook["clientConfig"]["url"] for hook in doc["webhooks"]} == {
        f"{URL}/agents", f"{URL}/governance"}


@pytest.mark.parametrize(("url", "says"), [
    ("http://h", "the scheme is http"), ("ftp://h", "the scheme is ftp"),
    ("h:443", "no scheme"), ("//h/x", "no scheme"), ("", "empty"), ("https://h /x", "whitespace"),
    ("https://u@h", "user information"), ("https://h/x?a=b", "a query"),
    ("https://h/x?", "a query"), ("https://h/x#f", "a fragment"), ("https://:443/x", "no host"),
    ("https://h:99999", "not a URL"), ("https://h:0", "port 0"),
])
def test_webhook_urls_are_https_with_a_host(url: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as refused:
        https_url(url)
    assert str(refused.value).startswith("--url: ")
    if "@" in url:
        assert url not in str(refused.value)


@pytest.mark.parametrize("url", ["https://h", "https://webhook.ns.svc:9443/base",
                                 "https://[::1]:9443", "HTTPS://h/x"])
def test_https_urls_with_a_host_are_accepted(url: str) -> None:
    assert https_url(url) == url


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"fgentic-governance {version()}\n"
    assert version() == metadata.version("fgentic-governance")


def test_version_as_a_subprocess() -> None:
    done = subprocess.run([sys.executable, "-m", "fgentic_governance.cli", "--version"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == f"fgentic-governance {version()}\n"
