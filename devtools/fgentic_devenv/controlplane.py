"""etcd + kube-apiserver on loopback ports, the way controller-runtime's envtest runs them.

No controller-manager or scheduler runs: CRDs, admission, RBAC and validation are all served by
kube-apiserver itself, which is what the operator and webhook tests need.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import urllib.error
import urllib.request
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fgentic_devenv import StartupError, free_port, pidfiles, terminate, wait_until
from fgentic_devenv.binaries import binary
from fgentic_governance.serving.tls import CertificateAuthority, KeyPair

ADMIN_USER = "fgentic-admin"
SERVICE_CIDR = "10.0.0.0/24"
SERVING_HOSTS = ["127.0.0.1", "localhost", "kubernetes.default.svc", "10.0.0.1"]
# ServiceAccount admission would wait for token controllers that never run here (envtest does
# the same); the webhook and policy plugins are on by default but listed to make it explicit.
ADMISSION_PLUGINS = (
    "ValidatingAdmissionWebhook,MutatingAdmissionWebhook,"
    "ValidatingAdmissionPolicy,MutatingAdmissionPolicy"
)


class KubectlError(RuntimeError):
    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(args)} exited {returncode}: {stderr}")
        self.returncode = returncode
        self.stderr = stderr


@dataclass(frozen=True)
class NodeSettings:
    """How the API server must differ when a kubelet and controllers run beside it: bound to
    the test bridge (pods reach it through the ``kubernetes`` Service), the ServiceAccount
    admission and Node authorizer on, and a client certificate for the kubelet's port."""

    address: str
    port: int
    service_cidr: str
    service_ip: str


class LocalControlPlane:
    """A throw-away etcd + kube-apiserver whose state and logs live in ``workdir``."""

    def __init__(self, workdir: Path, *, startup_timeout: float = 60.0,
                 node: NodeSettings | None = None) -> None:
        """``node``: serve a real node (``node.py``) instead of envtest-style loopback."""
        self.workdir = workdir
        self.startup_timeout = startup_timeout
        self.node = node
        self.kubeconfig = workdir / "kubeconfig"
        self.server = ""
        self.ca_pem = b""
        self._ca: CertificateAuthority | None = None
        self._admin: KeyPair | None = None
        self._etcd_url = ""
        self._procs: list[subprocess.Popen[bytes]] = []
        self._apiserver: subprocess.Popen[bytes] | None = None
        # Runs on garbage collection and at interpreter exit, so servers never outlive us.
        self._finalizer = weakref.finalize(self, _stop_all, self._procs)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalControlPlane:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            self._write_admin_kubeconfig()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM the apiserver, then etcd (reverse start order); SIGKILL stragglers."""
        _stop_all(self._procs)

    def restart_apiserver(self) -> None:
        """SIGTERM kube-apiserver and start it again on the same port; etcd (and so every
        object) stays as it was."""
        if self._apiserver is None:
            raise RuntimeError("control plane not started")
        self._procs.remove(self._apiserver)
        terminate(self._apiserver)
        self._apiserver = None
        self._start_apiserver()

    def __enter__(self) -> LocalControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- helpers for callers ---------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120.0) -> str:
        """Run the cached kubectl against this control plane; return stdout, raise on failure."""
        cmd = [str(binary("kubectl")), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode != 0:
            raise KubectlError(args, result.returncode, result.stderr.strip())
        return result.stdout

    def install_crds(self, paths: Sequence[Path], timeout: float = 60.0) -> None:
        """Server-side apply CRD manifests and wait until every one is Established."""
        if not paths:
            return
        files = [arg for path in paths for arg in ("-f", str(path))]
        self.kubectl("apply", "--server-side", "--force-conflicts",
                     "--field-manager=fgentic-devenv", *files)
        self.kubectl("wait", "--for", "condition=established", f"--timeout={timeout:.0f}s",
                     *files, timeout=timeout + 30)

    def ensure_namespace(self, name: str) -> None:
        manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def issue_client(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate this apiserver accepts (CN=user, O=groups)."""
        if self._ca is None:
            raise RuntimeError("control plane not started")
        return self._ca.issue_client(user, groups)

    def write_kubeconfig(self, path: Path, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig authenticating as ``user``; it has no RBAC bindings unless added."""
        _write_kubeconfig(path, self.server, self.ca_pem, user, self.issue_client(user, groups))
        return path

    # -- internals -------------------------------------------------------------------------

    def _pki(self, name: str) -> Path:
        return self.workdir / "pki" / name

    def _write_pki(self) -> None:
        self._pki("").mkdir(parents=True, exist_ok=True)
        self._ca = CertificateAuthority("fgentic-local-ca")
        self.ca_pem = self._ca.cert_pem
        self._pki("ca.crt").write_bytes(self.ca_pem)
        hosts = SERVING_HOSTS if self.node is None else [
            *SERVING_HOSTS, self.node.address, self.node.service_ip,
            "kubernetes", "kubernetes.default", "kubernetes.default.svc.cluster.local"]
        self._ca.issue_server(hosts).write(
            self._pki("apiserver.crt"), self._pki("apiserver.key")
        )
        self._admin = self._ca.issue_client(ADMIN_USER, ("system:masters",))
        self._admin.write(self._pki("admin.crt"), self._pki("admin.key"))
        if self.node is not None:
            self._ca.issue_client("kube-apiserver-kubelet-client", ("system:masters",)).write(
                self._pki("kubelet-client.crt"), self._pki("kubelet-client.key"))
        sa_key = ec.generate_private_key(ec.SECP256R1())
        self._pki("sa.key").touch(mode=0o600)
        self._pki("sa.key").write_bytes(sa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ))
        self._pki("sa.pub").write_bytes(sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo,
        ))

    def _spawn(self, name: str, cmd: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.workdir / f"{name}.log"
        with log.open("ab") as out:
            # Own session: a terminal's Ctrl-C reaches us, and we stop children in order.
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append(proc)
        pidfiles.record(log, proc)
        return proc, log

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self._etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        proc, log = self._spawn("etcd", [
            str(binary("etcd")),
            "--name=fgentic",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={self._etcd_url}",
            f"--advertise-client-urls={self._etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=fgentic={peer_url}",
            "--unsafe-no-fsync",  # throw-away data; fsync dominates start-up and CRD installs
            "--log-level=warn",
        ])
        health = f"{self._etcd_url}/health"
        wait_until(lambda: _http_ok(health, None), proc, what="etcd", log=log,
                   timeout=self.startup_timeout)

    def _start_apiserver(self) -> None:
        # The same port on a restart: kubeconfigs already handed out stay valid.
        address = "127.0.0.1" if self.node is None else self.node.address
        port = (int(self.server.rsplit(":", 1)[1]) if self.server
                else self.node.port if self.node else free_port())
        self.server = f"https://{address}:{port}"
        proc, log = self._spawn("kube-apiserver", [
            str(binary("kube-apiserver")),
            f"--etcd-servers={self._etcd_url}",
            f"--secure-port={port}",
            f"--bind-address={address}",
            f"--advertise-address={address}",
            f"--cert-dir={self._pki('')}",  # never the default /var/run/kubernetes
            f"--tls-cert-file={self._pki('apiserver.crt')}",
            f"--tls-private-key-file={self._pki('apiserver.key')}",
            f"--client-ca-file={self._pki('ca.crt')}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self._pki('sa.pub')}",
            f"--service-account-signing-key-file={self._pki('sa.key')}",
            "--allow-privileged=true",
            "--profiling=false",
            *(self._envtest_args() if self.node is None else self._node_args()),
        ])
        self._apiserver = proc
        context = _client_context(self._pki("ca.crt"), self._pki("admin.crt"),
                                  self._pki("admin.key"))
        readyz = f"{self.server}/readyz"
        wait_until(lambda: _http_ok(readyz, context), proc, what="kube-apiserver", log=log,
                   timeout=self.startup_timeout)

    @staticmethod
    def _envtest_args() -> list[str]:
        return [f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=RBAC",
                f"--enable-admission-plugins={ADMISSION_PLUGINS}",
                "--disable-admission-plugins=ServiceAccount"]

    def _node_args(self) -> list[str]:
        assert self.node is not None
        return [f"--service-cluster-ip-range={self.node.service_cidr}",
                "--authorization-mode=Node,RBAC",
                f"--enable-admission-plugins={ADMISSION_PLUGINS},NodeRestriction",
                # logs/exec reach the kubelet by the node's bridge address; webhooks are called
                # at their endpoints (no ClusterIP hop from the host).
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={self._pki('kubelet-client.crt')}",
                f"--kubelet-client-key={self._pki('kubelet-client.key')}",
                "--enable-aggregator-routing=true"]

    def _write_admin_kubeconfig(self) -> None:
        assert self._admin is not None
        _write_kubeconfig(self.kubeconfig, self.server, self.ca_pem, ADMIN_USER, self._admin)


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    # Reverse start order: the apiserver must not lose etcd while it drains.
    while procs:
        terminate(procs.pop())


def _client_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    return context


def _http_ok(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _write_kubeconfig(path: Path, server: str, ca_pem: bytes, user: str, cred: KeyPair) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fgentic-local", "cluster": {
            "server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": _b64(cred.cert_pem),
            "client-key-data": _b64(cred.key_pem)}}],
        "contexts": [{"name": "fgentic-local", "context": {
            "cluster": "fgentic-local", "user": user}}],
        "current-context": "fgentic-local",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


__all__ = ["ADMIN_USER", "KubectlError", "LocalControlPlane", "NodeSettings", "StartupError"]
