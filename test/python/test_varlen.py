"""Varlen: packed sequences of their own lengths, empty and length-1 ones among
them, under the one gate on every body in the interpreter; the oracle runs per sequence
(fmha_mlir/varlen_problem.py). The refusals and the runtime's checks of cu_seqlens and the max lengths."""
import dataclasses

import numpy as np
import pytest

from fmha_mlir.dtypes import from_storage
from fmha_mlir.errors import RuntimeLaunchError, SpecError
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import check_scalars, run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.varlen_problem import make_varlen_problem

# Sequence 0 has no queries, 1 no keys and one query, 2 and 3 cross key and query blocks.
LENGTHS_Q = (0, 1, 37, 130)
LENGTHS_K = (5, 0, 200, 64)


@pytest.fixture(scope="module")
def compiler():
    from fmha_mlir.compiler import Compiler

    return Compiler()


def _bundle(spec, arch, compiler, body):
    from fmha_mlir.api import compile_bundle

    return compile_bundle(spec, arch, compiler, body=body)


def _passes(spec, arch, body, compiler, lengths_q=LENGTHS_Q, lengths_k=LENGTHS_K):
    bundle = _bundle(spec, arch, compiler, body)
    problem = make_varlen_problem(spec, lengths_q, lengths_k, heads_q=4, seed=3)
    outputs = run_bundle(bundle, CpuExecutor(), problem.tensors, problem.scalars)
    checks = problem.check(outputs, bundle.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]
    return outputs, problem


@pytest.mark.parametrize("arch,body,dtype,mask", [
    ("sm_90", "tiled", "bf16", "none"),
    ("sm_90", "tiled", "f16", "bottom_right"),
    ("gfx942", "tiled", "bf16", "top_left"),
    ("gfx942", "tiled", "f16", "window:16,4"),
    ("sm_90", "warp", "f16", "bottom_right"),
    ("gfx942", "warp", "f32", "top_left"),
])
def test_varlen_matches_the_oracle_per_sequence(arch, body, dtype, mask, compiler):
    spec = AttentionBwdSpec(dtype, 64, gqa_ratio=2, mask=Mask.parse(mask), varlen=True)
    outputs, problem = _passes(spec, arch, body, compiler)
    # The empty sides: no queries -> dK = dV = 0 for sequence 0's keys; no keys -> dQ = 0 (not NaN).
    assert np.all(from_storage(outputs["dk"][:5], dtype) == 0)
    assert np.all(from_storage(outputs["dq"][0], dtype) == 0)


def test_varlen_alibi_applies_per_sequence(compiler):
    spec = AttentionBwdSpec("bf16", 64, gqa_ratio=2, mask=Mask("causal_bottom_right"), bias="alibi", varlen=True)
    _passes(spec, "sm_90", "tiled", compiler)


def test_varlen_kernels_are_not_the_padded_ones(compiler):
    """The views and guards are built only for varlen specs: the padded kernels keep their IR."""
    spec = AttentionBwdSpec("bf16", 64, varlen=True)
    varlen = _bundle(spec, "sm_90", compiler, "tiled")
    padded = _bundle(dataclasses.replace(spec, varlen=False), "sm_90", compiler, "tiled")
    assert "memref.reinterpret_cast" in varlen.interp_ir and "memref.reinterpret_cast" not in padded.interp_ir
    assert varlen.manifest["scalars"] == ["max_seqlen_q", "max_seqlen_k"] and "scalars" not in padded.manifest


@pytest.mark.parametrize("change,word", [
    (dict(deterministic=True), "deterministic"),
    (dict(bias="elementwise"), "bias"),
    (dict(bias="alibi", alibi_slopes=True), "slopes"),
])
def test_varlen_refuses_what_it_does_not_build(change, word):
    spec = AttentionBwdSpec("bf16", 64, varlen=True, **change)
    reasons = [r for r in spec.reasons() if r.field == "varlen"]
    assert reasons and word in str(reasons[0])


def test_runtime_checks_the_scalars_and_cu_seqlens(compiler):
    spec = AttentionBwdSpec("bf16", 64, varlen=True)
    bundle = _bundle(spec, "sm_90", compiler, "tiled")
    problem = make_varlen_problem(spec, (3, 4), (5, 2), heads_q=2)
    with pytest.raises(RuntimeLaunchError, match="max_seqlen_k"):
        run_bundle(bundle, CpuExecutor(), problem.tensors, {"max_seqlen_q": 4})
    with pytest.raises(RuntimeLaunchError, match="max_seqlen_q is 3"):
        run_bundle(bundle, CpuExecutor(), problem.tensors, {**problem.scalars, "max_seqlen_q": 3})
    bad = dict(problem.tensors, cu_seqlens_k=np.array([0, 5, 6], np.int32))
    with pytest.raises(RuntimeLaunchError, match="cu_seqlens_k"):
        run_bundle(bundle, CpuExecutor(), bad, problem.scalars)


def test_a_max_length_past_the_packed_total_sizes_nothing_past_it(compiler):
    """max_seqlen is an upper bound (FlashAttention's): 2^31 - 1 runs as the packed total would, instead
    of sizing grids and workspaces of hundreds of GiB."""
    spec = AttentionBwdSpec("bf16", 64, varlen=True)
    bundle = _bundle(spec, "sm_90", compiler, "tiled")
    problem = make_varlen_problem(spec, (3, 4), (5, 2), heads_q=2)
    huge = {"max_seqlen_q": 2**31 - 1, "max_seqlen_k": 2**31 - 1}
    assert check_scalars(bundle, problem.tensors, huge) == {"max_seqlen_q": 7, "max_seqlen_k": 7}
    outputs = run_bundle(bundle, CpuExecutor(), problem.tensors, huge)
    checks = problem.check(outputs, bundle.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]


def test_varlen_problem_refuses_bad_lengths():
    spec = AttentionBwdSpec("bf16", 64, varlen=True)
    with pytest.raises(SpecError, match="lengths"):
        make_varlen_problem(spec, (1, 2), (3,))
    with pytest.raises(SpecError, match="at least one token"):
        make_varlen_problem(spec, (0, 0), (3, 1))


def test_packed_oracle_keeps_the_rounding_model_of_ds():
    """The gate's model of dS's rounding (term_magnitudes of dQ, dK) is packed as the gradients are:
    each sequence's own, zeros for a sequence without queries; a lowp reference has none."""
    from fmha_mlir.numerics import MATRIX_K16

    spec = AttentionBwdSpec("f16", 64, mask=Mask("causal_bottom_right"), varlen=True)
    problem = make_varlen_problem(spec, (2, 0, 9), (7, 3, 1), heads_q=2, seed=5)
    packed = problem.oracle_gradients()
    assert set(packed.term_magnitudes) == {"dq", "dk"} and not problem.lowp_gradients(MATRIX_K16).term_magnitudes
    first, last = problem.parts[0].oracle_gradients(), problem.parts[2].oracle_gradients()
    np.testing.assert_array_equal(packed.term_magnitudes["dq"], np.concatenate(
        [first.term_magnitudes["dq"][0].transpose(1, 0, 2), last.term_magnitudes["dq"][0].transpose(1, 0, 2)]))
    np.testing.assert_array_equal(packed.term_magnitudes["dk"][7:10], 0)
    np.testing.assert_array_equal(packed.term_magnitudes["dk"][10:], last.term_magnitudes["dk"][0].transpose(1, 0, 2))


def test_api_takes_packed_tensors_and_cu_seqlens():
    from fmha_mlir import attention_bwd

    spec = AttentionBwdSpec("f16", 64, mask=Mask("causal_bottom_right"), varlen=True)
    problem = make_varlen_problem(spec, (2, 0, 9), (7, 3, 1), heads_q=2, seed=5)
    t = problem.tensors
    dq, dk, dv = attention_bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], mask="bottom_right",
                               executor="cpu", arch="sm_90", cu_seqlens_q=t["cu_seqlens_q"],
                               cu_seqlens_k=t["cu_seqlens_k"])   # max lengths read from cu_seqlens
    from fmha_mlir.numerics import MATRIX_K16

    checks = problem.check({"dq": dq, "dk": dk, "dv": dv}, MATRIX_K16)
    assert all(c.passed for c in checks), [str(c) for c in checks]
