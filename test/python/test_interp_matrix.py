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
from fmha_mlir.spec import AttentionBwdSpec, Mask

DTYPES = ("f16", "bf16", "f32")
MASKS = (Mask(), Mask("causal_top_left"), Mask("causal_bottom_right"), Mask("sliding_window", 4, 1))
HDIMS = (64, 128, 256)
GQA = (1, 4)
ARCHES = ("gfx942", "sm_90")
MATRIX = list(itertools.product(DTYPES, MASKS, HDIMS, GQA, ARCHES))


@pytest.fixture(scope="module")
def compiler():
    return Compiler()


@pytest.mark.parametrize("dtype,mask,hdim,gqa,arch", MATRIX,
                         ids=[f"{d}-{m}-d{h}-g{g}-{a}" for d, m, h, g, a in MATRIX])
def test_variant_matches_the_oracle(compiler, dtype, mask, hdim, gqa, arch):
    index = MATRIX.index((dtype, mask, hdim, gqa, arch))
    spec = AttentionBwdSpec(dtype=dtype, hdim_q=hdim, gqa_ratio=gqa, mask=mask)
    seqlens = ((5, 9), (9, 5))[index % 2]
    problem = make_problem(spec, ProblemSize(1, 4, *seqlens), seed=index, layout=("bhsd", "bshd")[index // 2 % 2])
    bundle = compile_bundle(spec, arch, compiler)
    assert bundle.target.wave_size == (64 if arch == "gfx942" else 32)
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=index),
                       {name: problem.tensors[name] for name in ("q", "k", "v", "o", "do", "lse")})
    checks = problem.check(grads)
    assert all(check.passed for check in checks), [str(check) for check in checks]
