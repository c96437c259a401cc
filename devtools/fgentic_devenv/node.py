"""A real single-node Kubernetes cluster on this machine, for the cluster test tier.

The envtest-style control plane (controlplane.py) plus what runs pods: kube-controller-manager,
kube-scheduler, containerd + runc + the CNI bridge plugin, kubelet, kube-proxy (iptables), a
cluster DNS (dnsmasq) and, optionally, kube-router as the NetworkPolicy enforcer. The settings
that matter on this machine kind are in ``../shared/upstream/node/NODE.md``.

Every packet stays here: the components bind to loopback or to a private bridge this module
creates, pods get addresses on that bridge, an nft guard drops anything forwarded between the
bridge and another interface, and no DNS name resolves outside the cluster. Teardown
(:func:`teardown`) works from the work directory alone, so ``hack/cluster.sh down`` cleans up
after a run that died: processes by pid file and by cgroup, mounts, chains, ipsets, the bridge,
the guard, ``ip_forward``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import yaml

from fgentic_devenv import StartupError, alive, log_tail
from fgentic_devenv.binaries import build, cache_dir
from fgentic_devenv.controlplane import LocalControlPlane, NodeSettings

NODE_NAME = "fgentic-node"
BRIDGE = "fgentic0"
POD_CIDR = "10.244.77.0/24"
BRIDGE_ADDRESS = "10.244.77.1"
SERVICE_CIDR = "10.96.77.0/24"
KUBERNETES_SERVICE_IP = "10.96.77.1"
APISERVER_PORT = 6443
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
GUARD_TABLE = "fgentic_guard"
NODE_BINARIES = ("kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy",
                 "kube-router", "pause")
HOST_COMMANDS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "dnsmasq", "ip",
                 "iptables", "nft", "ipset", "umoci", "skopeo")
CNI_DIR = Path("/usr/lib/cni")
KUBE_ROUTER_IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-", "kube-router-")


def node_binary(name: str) -> Path:
    """A cached node binary, built by hack/build-controlplane.sh node when missing."""
    path = cache_dir() / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        build("node")
    return path


def preflight() -> None:
    """Fail with one clear message when this machine cannot run a node."""
    if os.geteuid() != 0:
        raise StartupError("the cluster tier runs kubelet and containerd: it needs root")
    missing = [c for c in HOST_COMMANDS if shutil.which(c) is None]
    if missing:
        raise StartupError(f"missing host commands {missing}: run hack/bootstrap.sh")
    if not (CNI_DIR / "bridge").is_file():
        raise StartupError(f"no CNI bridge plugin in {CNI_DIR}: run hack/bootstrap.sh")


class LocalCluster:
    """The control plane, a node and (``network_policy=True``) kube-router, in ``workdir``."""

    def __init__(self, workdir: Path, *, network_policy: bool = True,
                 images: Sequence[Path] = (), startup_timeout: float = 120.0) -> None:
        self.workdir = workdir.resolve()
        self.network_policy = network_policy
        self.images = list(images)
        self.startup_timeout = startup_timeout
        self._lock: IO[str] | None = None
        self.cp = LocalControlPlane(self.workdir / "cp", node=NodeSettings(
            address=BRIDGE_ADDRESS, port=APISERVER_PORT, service_cidr=SERVICE_CIDR,
            service_ip=KUBERNETES_SERVICE_IP))

    @property
    def kubeconfig(self) -> Path:
        return self.cp.kubeconfig

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        preflight()
        binaries = {name: node_binary(name) for name in NODE_BINARIES}
        self._lock = _take_machine_lock(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            _network_up(self.workdir)
            self.cp.start()
            self._write_configs()
            self._start("containerd", ["containerd", "--config", str(self._p("containerd.toml"))])
            self._wait(lambda: self._p("containerd", "containerd.sock").exists(), "containerd")
            self._import(_pause_archive(binaries["pause"]), *self.images)
            self._start_control_loops(binaries)
            self._start_node(binaries)
            self._wait_node_ready()
            self._start_network_policy(binaries)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            _delete_pods(self.cp)
        teardown(self.workdir)
        self.cp.stop()
        if self._lock is not None:
            ACTIVE.unlink(missing_ok=True)
            self._lock.close()
            self._lock = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- helpers for callers ---------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120.0) -> str:
        return self.cp.kubectl(*args, input=input, timeout=timeout)

    def import_image(self, archive: Path) -> None:
        self._import(archive)

    def ctr(self, *args: str) -> str:
        return _run(["ctr", "--address", str(self._p("containerd", "containerd.sock")),
                     "-n", "k8s.io", *args])

    # -- internals -------------------------------------------------------------------------

    def _p(self, *parts: str) -> Path:
        return self.workdir.joinpath(*parts)

    def _start(self, name: str, cmd: list[str]) -> None:
        log = self._p(f"{name}.log")
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=self.workdir)
        _pid_file(self.workdir, name, proc.pid)
        time.sleep(0.2)
        if proc.poll() is not None:
            raise StartupError(f"{name} exited with {proc.returncode}:\n{log_tail(log)}")

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        raise StartupError(f"{what} not ready after {self.startup_timeout:.0f}s:\n"
                           f"{log_tail(self._p(what + '.log'))}")

    def _import(self, *archives: Path) -> None:
        for archive in archives:
            self.ctr("images", "import", str(archive))

    def _kubeconfig(self, name: str, user: str, groups: tuple[str, ...] = ()) -> Path:
        return self.cp.write_kubeconfig(self._p("kubeconfigs", f"{name}.yaml"), user, groups)

    def _write_configs(self) -> None:
        for sub in ("cni/net.d", "cni/ipam", "containerd", "kubelet", "pods-logs", "kubeconfigs"):
            self._p(sub).mkdir(parents=True, exist_ok=True)
        self._p("cni", "net.d", "10-fgentic.conflist").write_text(json.dumps(_cni(self.workdir)))
        self._p("containerd.toml").write_text(_containerd_toml(self.workdir))
        self._p("resolv.conf").write_text(f"nameserver {BRIDGE_ADDRESS}\n")
        self._p("kubelet.yaml").write_text(yaml.safe_dump(_kubelet_config(self.workdir)))
        self._p("kube-proxy.yaml").write_text(yaml.safe_dump(_proxy_config(
            self._kubeconfig("kube-proxy", "system:kube-proxy"))))

    def _start_control_loops(self, binaries: dict[str, Path]) -> None:
        pki = self.cp.workdir / "pki"
        kcm = self._kubeconfig("kube-controller-manager", "system:kube-controller-manager")
        self._start("kube-controller-manager", [
            str(binaries["kube-controller-manager"]), f"--kubeconfig={kcm}",
            f"--authentication-kubeconfig={kcm}", f"--authorization-kubeconfig={kcm}",
            "--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allocate-node-cidrs=false", "--controllers=*,-nodeipam,-cloud-node-lifecycle",
            f"--cert-dir={self._p('kcm-certs')}"])
        sched = self._kubeconfig("kube-scheduler", "system:kube-scheduler")
        self._start("kube-scheduler", [
            str(binaries["kube-scheduler"]), f"--kubeconfig={sched}",
            f"--authentication-kubeconfig={sched}", f"--authorization-kubeconfig={sched}",
            "--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false",
            f"--cert-dir={self._p('scheduler-certs')}"])

    def _start_node(self, binaries: dict[str, Path]) -> None:
        kubelet = self._kubeconfig("kubelet", f"system:node:{NODE_NAME}", ("system:nodes",))
        self._start("kubelet", [
            str(binaries["kubelet"]), f"--config={self._p('kubelet.yaml')}",
            f"--kubeconfig={kubelet}", f"--root-dir={self._p('kubelet')}",
            f"--cert-dir={self._p('kubelet', 'pki')}", f"--hostname-override={NODE_NAME}",
            f"--node-ip={BRIDGE_ADDRESS}", "--v=1"])
        self._start("kube-proxy", [str(binaries["kube-proxy"]),
                                   f"--config={self._p('kube-proxy.yaml')}"])
        self._start("dnsmasq", [
            "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
            "--no-hosts", "--bind-interfaces", f"--listen-address={BRIDGE_ADDRESS}",
            "--except-interface=lo", f"--pid-file={self._p('dnsmasq.pidfile')}", "--user=root",
            "--host-record=kubernetes.default.svc,kubernetes.default.svc.cluster.local,"
            f"{KUBERNETES_SERVICE_IP}", "--local=/cluster.local/", "--log-facility=-"])

    def _start_network_policy(self, binaries: dict[str, Path]) -> None:
        """kube-router finds its Node object at start: only after the kubelet registered."""
        if self.network_policy:
            router = self._kubeconfig("kube-router", "fgentic-admin", ("system:masters",))
            self._start("kube-router", [
                str(binaries["kube-router"]), f"--kubeconfig={router}",
                "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
                "--run-loadbalancer=false", "--enable-cni=false",
                f"--hostname-override={NODE_NAME}", f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--health-port=0", "--metrics-port=0", "--v=1"])

    def _wait_node_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                status = self.kubectl("get", "node", NODE_NAME, "-o",
                                      "jsonpath={.status.conditions[?(@.type=='Ready')].status}")
                if status.strip() == "True":
                    return
            time.sleep(1)
        raise StartupError(f"node not Ready after {self.startup_timeout:.0f}s:\n"
                           f"{log_tail(self._p('kubelet.log'))}")


# -- one node per machine ---------------------------------------------------------------------

LOCK = Path("/run/fgentic-node.lock")
ACTIVE = Path("/run/fgentic-node.active")
"""The bridge, its addresses and port 6443 exist once per machine: one node at a time. The
lock is held while a node runs; ACTIVE names its work directory, so the next start can clean
up after a run that died without tearing down (a killed test session)."""


def _take_machine_lock(workdir: Path) -> IO[str]:
    lock = LOCK.open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        previous = ACTIVE.read_text().strip() if ACTIVE.is_file() else "?"
        raise StartupError(f"another test node is running on this machine ({previous}); "
                           f"stop it, or run: hack/cluster.sh down {previous}") from None
    if ACTIVE.is_file():  # its owner is gone (we hold the lock): clean up after it
        teardown(Path(ACTIVE.read_text().strip()))
    teardown(workdir)
    ACTIVE.write_text(str(workdir))
    return lock


# -- configuration ---------------------------------------------------------------------------


def _cni(workdir: Path) -> dict[str, object]:
    return {"cniVersion": "1.0.0", "name": "fgentic", "plugins": [{
        "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
        "hairpinMode": True,
        "ipam": {"type": "host-local", "dataDir": str(workdir / "cni" / "ipam"),
                 "ranges": [[{"subnet": POD_CIDR, "gateway": BRIDGE_ADDRESS}]],
                 "routes": [{"dst": "0.0.0.0/0"}]}}]}


def _containerd_toml(workdir: Path) -> str:
    base = workdir / "containerd"
    return f"""version = 2
root = "{base / 'root'}"
state = "{base / 'state'}"
[grpc]
  address = "{base / 'containerd.sock'}"
[ttrpc]
  address = "{base / 'containerd.sock.ttrpc'}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_DIR}"
    conf_dir = "{workdir / 'cni' / 'net.d'}"
"""


def _kubelet_config(workdir: Path) -> dict[str, object]:
    pki = workdir / "cp" / "pki"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": BRIDGE_ADDRESS, "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{workdir / 'containerd' / 'containerd.sock'}",
        "cgroupDriver": "cgroupfs", "failSwapOn": False, "failCgroupV1": False,
        "makeIPTablesUtilChains": False, "podLogsDir": str(workdir / "pods-logs"),
        "clusterDNS": [BRIDGE_ADDRESS], "clusterDomain": "cluster.local",
        "resolvConf": str(workdir / "resolv.conf"),
        "registerWithTaints": [], "maxPods": 60,
        # A shared test machine: never evict for its disk or memory, never GC our images.
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False, "syncFrequency": "10s",
        "fileCheckFrequency": "10s", "nodeStatusReportFrequency": "10s",
    }


def _proxy_config(kubeconfig: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "mode": "iptables",
        "clusterCIDR": POD_CIDR, "hostnameOverride": NODE_NAME, "bindAddress": "127.0.0.1",
        "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
        # Leave the machine's conntrack sysctls alone (the sandbox may refuse them).
        "conntrack": {"maxPerCore": 0},
        "nodePortAddresses": [f"{BRIDGE_ADDRESS}/32"],
        "iptables": {"localhostNodePorts": False},
    }


# -- images ----------------------------------------------------------------------------------


def _pause_archive(pause: Path) -> Path:
    """The sandbox image, packed once from the pinned kubernetes module's pause.c."""
    out = cache_dir().parent / "image" / f"{pause.resolve().name}.tar"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.parent / f".pause-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        rootfs = work / "rootfs"
        rootfs.mkdir(parents=True)
        shutil.copy2(pause, rootfs / "pause")
        layout = f"{work / 'oci'}:3.10"
        _run(["umoci", "init", "--layout", str(work / "oci")])
        _run(["umoci", "new", "--image", layout])
        _run(["umoci", "insert", "--image", layout, str(rootfs / "pause"), "/pause"])
        _run(["umoci", "config", "--image", layout, "--config.entrypoint", "/pause",
              "--config.user", "65535:65535"])
        _run(["skopeo", "--insecure-policy", "copy", f"oci:{layout}",
              f"docker-archive:{out}.tmp:{PAUSE_IMAGE}"])
        os.replace(f"{out}.tmp", out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


# -- network ---------------------------------------------------------------------------------


def _network_up(workdir: Path) -> None:
    """The private bridge, the guard, and the sysctls the node needs (old values saved)."""
    saved = {key: _sysctl(key) for key in ("net/ipv4/ip_forward",
                                           "net/bridge/bridge-nf-call-iptables")}
    (workdir / "sysctl.json").write_text(json.dumps(saved))
    _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    _run(["ip", "addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])
    # Nothing forwarded between the bridge and any other interface, in either direction.
    _run(["nft", "-f", "-"], input=f"""table inet {GUARD_TABLE} {{
  chain forward {{
    type filter hook forward priority -300; policy accept;
    iifname "{BRIDGE}" oifname != "{BRIDGE}" counter drop
    oifname "{BRIDGE}" iifname != "{BRIDGE}" counter drop
  }}
}}
""")
    _write_sysctl("net/ipv4/ip_forward", "1")
    # NetworkPolicy between pods on one bridge is enforced only when bridged frames pass
    # through iptables.
    _write_sysctl("net/bridge/bridge-nf-call-iptables", "1")


def _sysctl(key: str) -> str:
    try:
        return Path("/proc/sys", key).read_text().strip()
    except OSError:
        return ""


def _write_sysctl(key: str, value: str) -> None:
    with contextlib.suppress(OSError):
        Path("/proc/sys", key).write_text(value)


# -- teardown --------------------------------------------------------------------------------


def _pid_file(workdir: Path, name: str, pid: int) -> None:
    (workdir / "pids").mkdir(parents=True, exist_ok=True)
    (workdir / "pids" / f"{name}.pid").write_text(str(pid))


STOP_ORDER = ("kube-router", "kubelet", "kube-proxy", "kube-scheduler",
              "kube-controller-manager", "dnsmasq", "containerd")


def _delete_pods(cp: LocalControlPlane) -> None:
    """Let kubelet stop the pods itself (volumes unmounted, sandboxes removed), briefly."""
    cp.kubectl("delete", "pods", "--all", "--all-namespaces", "--wait=false",
               "--grace-period=1", timeout=20)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not cp.kubectl("get", "pods", "-A", "-o", "name", timeout=10).strip():
            return
        time.sleep(1)


def teardown(workdir: Path) -> None:
    """Leave no process, mount, rule, ipset, bridge, cgroup or sysctl of ours behind. Safe
    to run any number of times, and on the leftovers of a run that died."""
    workdir = workdir.resolve()
    pids = workdir / "pids"
    for name in STOP_ORDER:
        _kill_pid_file(pids / f"{name}.pid")
    for pid in _processes_naming(workdir):  # containerd shims, pods' processes, anything ours
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _kill_cgroups()
    _unmount_under(workdir)
    with contextlib.suppress(Exception):
        _run([str(cache_dir() / "kube-proxy"), "--cleanup"], timeout=30)
    _remove_kube_chains()
    subprocess.run(["nft", "delete", "table", "inet", GUARD_TABLE], capture_output=True,
                   check=False)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
    saved = workdir / "sysctl.json"
    if saved.is_file():
        for key, value in json.loads(saved.read_text()).items():
            if value:
                _write_sysctl(key, value)
        saved.unlink()
    if pids.is_dir():
        shutil.rmtree(pids, ignore_errors=True)
    for sub in ("containerd", "kubelet", "cni", "cp/etcd-data"):
        shutil.rmtree(workdir / sub, ignore_errors=True)


def _kill_pid_file(path: Path) -> None:
    if not path.is_file():
        return
    with contextlib.suppress(ValueError, OSError):
        pid = int(path.read_text())
        _kill_group(pid)
    path.unlink(missing_ok=True)


def _kill_group(pid: int, timeout: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _ancestors() -> set[int]:
    """This process and its parents (``hack/cluster.sh down WORKDIR`` names the directory)."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def _processes_naming(workdir: Path) -> list[int]:
    """Processes whose command line names the work directory (shims, pods, the control
    plane), except this process and its parents."""
    spared, needle, found = _ancestors(), str(workdir).encode(), []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) not in spared:
            with contextlib.suppress(OSError):
                if needle in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
    return found


def _mounts_under(workdir: Path) -> list[str]:
    """Mount points below the work directory, deepest first (octal escapes of
    /proc/mounts decoded)."""
    prefix = str(workdir) + "/"
    mounts = {line.split()[1].encode().decode("unicode_escape")
              for line in Path("/proc/mounts").read_text().splitlines()}
    return sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True)


def _kube_chains(listing: str) -> list[str]:
    """The ``KUBE-*`` chains declared in an ``iptables-save`` listing."""
    return [line[1:].split()[0] for line in listing.splitlines() if line.startswith(":KUBE-")]


def _kill_cgroups() -> None:
    """Pods' processes live in kubelet's ``kubepods`` cgroups (cgroupfs driver): kill them
    all, then remove the cgroups deepest first."""
    for controller in Path("/sys/fs/cgroup").iterdir():
        root = controller / "kubepods"
        if not root.is_dir():
            continue
        groups = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for group in [*groups, root]:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
        for group in [*groups, root]:
            with contextlib.suppress(OSError):
                group.rmdir()


def _unmount_under(workdir: Path) -> None:
    for _ in range(3):
        ours = _mounts_under(workdir)
        if not ours:
            return
        for mount in ours:
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)


def _remove_kube_chains() -> None:
    """Every ``KUBE-*`` chain (kube-router's, kubelet's canaries and firewall) with the rules
    that jump to it, in IPv4 and IPv6, and kube-router's ipsets. Nothing else on a test machine
    makes them."""
    for save, tool in (("iptables-save", "iptables"), ("ip6tables-save", "ip6tables")):
        for table in ("filter", "nat", "mangle"):
            listing = subprocess.run([save, "-t", table], capture_output=True, text=True,
                                     check=False).stdout
            chains = _kube_chains(listing)
            for line in listing.splitlines():  # jumps from built-in chains first
                rule = shlex.split(line)
                if rule[:1] == ["-A"] and not rule[1].startswith("KUBE-") and any(
                        rule[i + 1] in chains for i, arg in enumerate(rule[:-1]) if arg == "-j"):
                    subprocess.run([tool, "-t", table, "-D", *rule[1:]], capture_output=True,
                                   check=False)
            for verb in ("-F", "-X"):
                for chain in chains:
                    subprocess.run([tool, "-t", table, verb, chain], capture_output=True,
                                   check=False)
    names = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True,
                           check=False).stdout.split()
    for name in names:
        if name.startswith(KUBE_ROUTER_IPSET_PREFIXES):
            subprocess.run(["ipset", "destroy", name], capture_output=True, check=False)


def leftovers(workdir: Path) -> list[str]:
    """What teardown must have removed, if anything is still there (for tests and `down`)."""
    found = []
    workdir = workdir.resolve()
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True,
                      check=False).returncode == 0:
        found.append(f"bridge {BRIDGE}")
    found += [f"mount {m}" for m in _mounts_under(workdir)]
    found += [f"process {pid}" for pid in _processes_naming(workdir)]
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True,
                           check=False).stdout
    found += [f"chain {chain}" for chain in _kube_chains(rules)]
    found += [f"cgroup {c}" for c in Path("/sys/fs/cgroup").glob("*/kubepods") if c.is_dir()]
    return found


def _run(cmd: list[str], *, input: str | None = None, timeout: float = 120) -> str:
    result = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                            check=False)
    if result.returncode != 0:
        raise StartupError(f"{' '.join(cmd[:4])} failed ({result.returncode}): "
                           f"{result.stderr.strip()[-2000:]}")
    return result.stdout


STORE_DB = "fgentic"


def _serve_store(workdir: Path) -> int:
    """``store WORKDIR``: the install page's store on a running node, in the foreground: a
    PostgreSQL with pgvector on the host listening on the bridge address (pods reach it there,
    nothing else can), database ``fgentic``; its DSN as pods see it goes to WORKDIR/dsn."""
    import asyncio
    import sys

    from fgentic_devenv.postgres import SUPERUSER, LocalPostgres

    with LocalPostgres(workdir, pod_network=(BRIDGE_ADDRESS, POD_CIDR)) as server:
        asyncio.run(server.create_database(STORE_DB, extensions=("vector",)))
        dsn = f"postgresql://{SUPERUSER}@{BRIDGE_ADDRESS}:{server.port}/{STORE_DB}"
        (workdir / "dsn").write_text(dsn)  # no newline: `--from-file` keeps it
        print(f"store up; pods reach it at {dsn} (also in {workdir / 'dsn'}); "
              f"Ctrl-C to stop", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fgentic_devenv.node up|down|check WORKDIR`` (hack/cluster.sh)."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in ("up", "down", "check", "store"):
        print("usage: node.py up|down|check|store WORKDIR", file=sys.stderr)
        return 2
    workdir = Path(args[1])
    if args[0] == "store":
        return _serve_store(workdir)
    if args[0] == "down":
        teardown(workdir)
        return 0
    if args[0] == "check":
        found = leftovers(workdir)
        print("\n".join(found) or "nothing left behind")
        return 1 if found else 0
    with LocalCluster(workdir) as cluster:  # in the foreground: Ctrl-C tears it down
        print(f"cluster up; KUBECONFIG={cluster.kubeconfig}; Ctrl-C to stop", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
