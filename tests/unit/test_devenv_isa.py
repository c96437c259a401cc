"""The instruction check reads VEX/EVEX prefixes and knows which functions are dispatched."""

from __future__ import annotations

import pytest

from fgentic_devenv import isa

DISASSEMBLY = """
vector.so:     file format elf64-x86-64

0000000000001000 <cosine_distance>:
    1000:\t62 f1 7c 48 10 04 07 \tvmovups (%rdi,%rax,1),%zmm0
    1007:\tc5 fc 28 c1          \tvmovaps %ymm1,%ymm0
    100b:\t48 89 e5             \tmov    %rsp,%rbp
0000000000002000 <VectorL2SquaredDistance.fma>:
    2000:\tc4 e2 71 b8 c2       \tvfmadd231ps %xmm2,%xmm1,%xmm0
0000000000003000 <BitHammingDistanceAvx512Popcount>:
    3000:\t62 f2 fd 48 55 c0    \tvpopcntq %zmm0,%zmm0
0000000000004000 <HalfvecL2SquaredDistanceF16c>:
    4000:\tc4 e2 79 13 c0       \tvcvtph2ps %xmm0,%xmm0
0000000000005000 <vector_in>:
    5000:\t66 0f 28 c1          \tmovapd %xmm1,%xmm0
    5004:\t66 62 f1 7c 08 10 00 \t(an EVEX after a legacy prefix)
"""


@pytest.mark.parametrize(("raw", "expected"), [
    (b"\x62\xf1\x7c\x48", "evex"), (b"\xc5\xfc\x28", "vex"), (b"\xc4\xe2\x71", "vex"),
    (b"\x66\x62\xf1", "evex"), (b"\xf3\x66\xc5\xf8", "vex"), (b"\x66\x0f\x28\xc1", None),
    (b"\x48\x89\xe5", None), (b"\x66\x66", None), (b"", None),
])
def test_a_prefix_byte_names_the_encoding(raw: bytes, expected: str | None) -> None:
    assert isa.encoding_of(raw) == expected


def test_counts_are_per_function_and_encoding() -> None:
    counts = isa.scan_disassembly(DISASSEMBLY)
    assert counts == {("cosine_distance", "evex"): 1, ("cosine_distance", "vex"): 1,
                      ("VectorL2SquaredDistance.fma", "vex"): 1,
                      ("BitHammingDistanceAvx512Popcount", "evex"): 1,
                      ("HalfvecL2SquaredDistanceF16c", "vex"): 1, ("vector_in", "evex"): 1}


def test_only_functions_outside_cpu_dispatch_are_findings() -> None:
    findings = isa.unguarded(isa.scan_disassembly(DISASSEMBLY))
    assert [(f.function, f.encoding) for f in findings] == [
        ("cosine_distance", "evex"), ("cosine_distance", "vex"), ("vector_in", "evex")]
    assert isa.describe(findings, limit=2) == (
        "cosine_distance (1 evex), cosine_distance (1 vex) and 1 more")


@pytest.mark.parametrize("name", [
    "BitJaccardDistanceAvx512Popcount", "pg_popcount_avx512", "pg_comp_crc32c_avx512",
    "HalfvecCosineSimilarityF16c", "VectorInnerProduct.fma", "VectorL1Distance.popcnt.1",
    "foo.avx2"])
def test_dispatched_names(name: str) -> None:
    assert isa.DISPATCHED.search(name)


@pytest.mark.parametrize("name", ["cosine_distance", "vector_norm", "HnswSearchLayer",
                                  "halfvec_l2_normalize", "fmadd_helper", "favx"])
def test_ordinary_names_are_not_dispatched(name: str) -> None:
    assert not isa.DISPATCHED.search(name)
