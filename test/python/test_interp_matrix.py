"""Every kernel variant of the compiler's matrix, run by the CPU SIMT interpreter against the oracle.

dtype x mask x hdim x GQA ratio x wave size (gfx942: wave64 with DPP reductions; sm_90: wave32 with
shuffles), at small odd sizes: seqlen_q < seqlen_k and seqlen_q > seqlen_k (rows that see no key
under bottom-right masks), BHSD and BSHD storage, atomics applied in a random order.
"""
from __future__ import annotations

import itertools

import pytest

from fmha_mlir.api import compile_bundle
from fmha_mlir.compiler import Compiler
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import Mask
from fmha_mlir.variants import variant_matrix

ARCHES = ("gfx942", "sm_90")
# A window small enough to cut these short rows on both sides.
MATRIX = list(itertools.product(variant_matrix(window=Mask("sliding_window", 4, 1)), ARCHES))


@pytest.fixture(scope="module")
def compiler():
    return Compiler()


@pytest.mark.parametrize("index", range(len(MATRIX)),
                         ids=[f"{s.dtype}-{s.mask}-d{s.hdim_q}-g{s.gqa_ratio}-{a}" for s, a in MATRIX])
def test_variant_matches_the_oracle(compiler, index):
    spec, arch = MATRIX[index]
    seqlens = ((5, 9), (9, 5))[index % 2]
    problem = make_problem(spec, ProblemSize(1, 4, *seqlens), seed=index, layout=("bhsd", "bshd")[index // 2 % 2])
    bundle = compile_bundle(spec, arch, compiler)
    assert bundle.target.wave_size == (64 if arch == "gfx942" else 32)
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=index),
                       {name: problem.tensors[name] for name in ("q", "k", "v", "o", "do", "lse")})
    checks = problem.check(grads)
    assert all(check.passed for check in checks), [str(check) for check in checks]
