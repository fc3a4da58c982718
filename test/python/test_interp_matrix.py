"""Every kernel variant of the compiler's matrix, for every body, run by the CPU SIMT interpreter
against the oracle through the one gate.

dtype x mask x hdim x GQA ratio x (arch, body): gfx942 warp body (wave64, DPP reductions), sm_90 warp
body (wave32, shuffles), sm_90 tiled body (mma.sync tiles) and gfx942 / gfx950 tiled body (MFMA tiles;
f16/bf16 only, gfx942 without d256, which takes the warp body), at small odd sizes:
seqlen_q < seqlen_k and seqlen_q > seqlen_k (rows that see no key under bottom-right masks), lengths
that fill no tile, BHSD and BSHD storage, atomics applied in a random order.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from fmha_mlir.api import compile_bundle
from fmha_mlir.bodies import choose_config
from fmha_mlir.compiler import Compiler
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.errors import SpecError
from fmha_mlir.spec import DTYPES, AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
from fmha_mlir.variants import variant_matrix

TARGETS = (("gfx942", "warp"), ("sm_90", "warp"), ("sm_90", "tiled"), ("gfx942", "tiled"), ("gfx950", "tiled"))
# A window small enough to cut these short rows on both sides.


def supported(spec, arch: str, body: str) -> bool:
    try:
        choose_config(spec, get_target(arch), body)
    except SpecError:
        return False
    return True


MATRIX = [(spec, arch, body)
          for spec, (arch, body) in itertools.product(variant_matrix(window=Mask("sliding_window", 4, 1)), TARGETS)
          if supported(spec, arch, body)]


# softcap on every (arch, body) and dtype, with and without a mask, GQA 2: a cap below the
# scores' range, so tanh is far from linear.
SOFTCAP = [(AttentionBwdSpec(dtype, 64, gqa_ratio=2, mask=Mask(mask), softcap=2.0, scale=0.5), arch, body)
           for (arch, body), dtype, mask in itertools.product(TARGETS, DTYPES, ("none", "causal_bottom_right"))
           if supported(AttentionBwdSpec(dtype, 64), arch, body)]


# softcap 30 at the default scale (scores of order 1 to 4, so y = s / c ~ 0.03-0.14, where the exponential
# form of tanh cancels) on every (arch, body) and dtype, against the gate's exact reference; gfx950's warp
# body too (cheap in f32), since each chip's exp2 and division approximations have to pass.
SOFTCAP_TARGETS = TARGETS + (("gfx950", "warp"),)
SOFTCAP_30 = [(AttentionBwdSpec(dtype, 64, gqa_ratio=2, mask=Mask(mask), softcap=30.0), arch, body)
              for (arch, body), dtype, mask in itertools.product(SOFTCAP_TARGETS, DTYPES,
                                                                 ("none", "causal_bottom_right"))
              if supported(AttentionBwdSpec(dtype, 64), arch, body)]


# ALiBi with the standard slopes, computed in the kernel: every (arch, body) and dtype, with
# and without a mask, GQA 2, and after a softcap in bf16.
ALIBI = [(AttentionBwdSpec(dtype, 64, gqa_ratio=2, mask=Mask(mask), bias="alibi"), arch, body)
         for (arch, body), dtype, mask in itertools.product(TARGETS, DTYPES, ("none", "causal_bottom_right"))
         if supported(AttentionBwdSpec(dtype, 64), arch, body)]
ALIBI += [(AttentionBwdSpec("bf16", 64, gqa_ratio=2, mask=Mask("causal_top_left"), bias="alibi", softcap=2.0,
                            scale=0.5), arch, body) for arch, body in TARGETS]


# An elementwise bias with dbias on every (arch, body) and dtype, with and without a mask, GQA 2,
# the bias's shape cycling through [1, H, Sq, Sk], [B, 1, ...], [1, 1, ...], [B, H, ...]; one after a softcap.
BIAS = [(AttentionBwdSpec(dtype, 64, gqa_ratio=2, mask=Mask(mask), bias="elementwise", dbias=True), arch, body)
        for (arch, body), dtype, mask in itertools.product(TARGETS, DTYPES, ("none", "causal_bottom_right"))
        if supported(AttentionBwdSpec(dtype, 64), arch, body)]
BIAS += [(AttentionBwdSpec("bf16", 64, gqa_ratio=2, mask=Mask("sliding_window", 4, 1), bias="elementwise",
                           softcap=2.0, scale=0.5), arch, body) for arch, body in TARGETS]
BROADCASTS = ("batch", "heads", "batch_heads", "none")

# ALiBi with a slopes tensor and d(slopes): every (arch, body) and dtype, slopes [1, H] and [B, H].
SLOPES = [(AttentionBwdSpec(dtype, 64, gqa_ratio=2, mask=Mask(mask), bias="alibi", alibi_slopes=True, dbias=True),
           arch, body)
          for (arch, body), dtype, mask in itertools.product(TARGETS, DTYPES, ("causal_top_left", "none"))
          if supported(AttentionBwdSpec(dtype, 64), arch, body)]


def gate(bundle, problem, executor: CpuExecutor) -> tuple[dict, list]:
    """The bundle's gradients on the problem's inputs, and the gate's checks of them."""
    grads = run_bundle(bundle, executor, problem.tensors)
    return grads, problem.check(grads, bundle.numerics)


@pytest.fixture(scope="module")
def compiler():
    return Compiler()


def test_the_matrix_covers_every_body():
    assert {(arch, body) for _, arch, body in MATRIX} == set(TARGETS)
    assert {spec.dtype for spec, _, body in MATRIX if body == "tiled"} == {"f16", "bf16"}
    assert {(arch, spec.hdim_q) for spec, arch, body in MATRIX if body == "tiled"} == {
        (arch, h) for arch in ("sm_90", "gfx942", "gfx950") for h in (64, 128, 256)} - {("gfx942", 256)}


@pytest.mark.parametrize("index", range(len(MATRIX)),
                         ids=[f"{s.dtype}-{s.mask}-d{s.hdim_q}-g{s.gqa_ratio}-{a}-{b}" for s, a, b in MATRIX])
def test_variant_matches_the_oracle(compiler, index):
    spec, arch, body = MATRIX[index]
    seqlens = ((5, 9), (9, 5))[index % 2]
    problem = make_problem(spec, ProblemSize(1, 4, *seqlens), seed=index, layout=("bhsd", "bshd")[index // 2 % 2])
    bundle = compile_bundle(spec, arch, compiler, body=body)
    assert (bundle.config.body, bundle.config.wave_size) == (body, get_target(arch).wave_size)
    _, checks = gate(bundle, problem, CpuExecutor(atomic_order="random", seed=index))
    assert all(check.passed for check in checks), [str(check) for check in checks]


@pytest.mark.parametrize("arch,dtype,hdim", [("gfx942", "f16", 320), ("gfx950", "bf16", 448), ("gfx942", "f16", 384),
                                            ("sm_90", "f16", 96)])
def test_lane_slices_of_a_non_power_of_two_width(compiler, arch, dtype, hdim):
    """hdim 320 / 448 on a wave of 64 (and 96 on 32) give each lane 5 / 7 / 3 elements: moved as
    power-of-two pieces, since AMDGPU's instruction selection aborts the process on a vector<5 x f16>
    extending load; the gradients pass the gate."""
    spec = AttentionBwdSpec(dtype, hdim, mask=Mask("causal_bottom_right"))
    bundle = compile_bundle(spec, arch, compiler, body="warp")
    problem = make_problem(spec, ProblemSize(1, 2, 6, 9), seed=hdim)
    _, checks = gate(bundle, problem, CpuExecutor(atomic_order="random", seed=1))
    assert all(check.passed for check in checks), [str(check) for check in checks]


@pytest.mark.parametrize("arch,body,dtype", [(arch, body, dtype)
                                              for (arch, body), dtype in itertools.product(SOFTCAP_TARGETS, DTYPES)
                                              if supported(AttentionBwdSpec(dtype, 64), arch, body)])
def test_softcap_saturates_without_nan(compiler, arch, body, dtype):
    """A cap far below the scores: 2^(2 scale dot log2(e) / c) overflows to inf for the largest, tanh
    must come out +-1 (no inf x 0 or inf / inf), the gradients still pass."""
    spec = AttentionBwdSpec(dtype, 64, mask=Mask("causal_bottom_right"), softcap=0.25, scale=0.5)
    problem = make_problem(spec, ProblemSize(1, 2, 24, 40), seed=3)
    scores = problem.values["q"] @ problem.values["k"].swapaxes(-1, -2) * 0.5
    assert (2 * scores.max() / 0.25) * 1.4427 > 128   # past f32's exponent range
    grads, checks = gate(compile_bundle(spec, arch, compiler, body=body), problem, CpuExecutor())
    assert all(np.isfinite(g).all() for g in grads.values())
    assert all(check.passed for check in checks), [str(check) for check in checks]


@pytest.mark.parametrize("index", range(len(SOFTCAP)),
                         ids=[f"{s.dtype}-{s.mask}-{a}-{b}" for s, a, b in SOFTCAP])
def test_softcap_matches_the_oracle(compiler, index):
    spec, arch, body = SOFTCAP[index]
    bundle = compile_bundle(spec, arch, compiler, body=body)
    assert bundle.spec.softcap == 2.0 and bundle.config.body == body
    problem = make_problem(spec, ProblemSize(1, 4, 24, 40), seed=index, layout="bshd")
    _, checks = gate(bundle, problem, CpuExecutor(atomic_order="random", seed=index))
    assert all(check.passed for check in checks), [str(check) for check in checks]


@pytest.mark.parametrize("index", range(len(SOFTCAP_30)),
                         ids=[f"{s.dtype}-{s.mask}-{a}-{b}" for s, a, b in SOFTCAP_30])
def test_softcap_30_on_scores_of_order_one_matches_the_exact_oracle(compiler, index):
    """The gate's references take tanh exactly; the interpreter gives exp2 and the approximate division
    the hardware's error: the kernel's own tanh has to be accurate enough for its dtype."""
    spec, arch, body = SOFTCAP_30[index]
    bundle = compile_bundle(spec, arch, compiler, body=body)
    for seed, seqlens in enumerate(((24, 40), (40, 24))):
        problem = make_problem(spec, ProblemSize(1, 4, *seqlens), seed=index + 100 * seed, layout="bshd")
        keys = np.repeat(problem.values["k"], spec.gqa_ratio, axis=1)
        scores = np.abs(problem.values["q"] @ keys.swapaxes(-1, -2)) * spec.scale
        assert 3 < scores.max() < 8 and np.median(scores) < 1
        _, checks = gate(bundle, problem, CpuExecutor(atomic_order="random", seed=index))
        assert all(check.passed for check in checks), [str(check) for check in checks]


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_exponential_tanh_fails_f32_softcap_30(compiler, monkeypatch, arch):
    """The gate can fail the f32 softcap: f16 / bf16's tanh (the exponential form alone, approximate
    division) in an f32 kernel is ~100-200 ulps off at these scores and fails FlashAttention's rule
    against the exact reference, where the f32 tanh passes."""
    from fmha_mlir.passes import score_mods

    spec = AttentionBwdSpec("f32", 64, gqa_ratio=2, softcap=30.0)
    problem = make_problem(spec, ProblemSize(1, 4, 24, 40), seed=0, layout="bshd")
    _, checks = gate(compile_bundle(spec, arch, compiler, body="warp"), problem, CpuExecutor())
    assert all(check.passed for check in checks), [str(check) for check in checks]
    f32_tanh = score_mods._tanh
    monkeypatch.setattr(score_mods, "_tanh",
                        lambda dot, spec, slope=False: f32_tanh(dot, dataclasses.replace(spec, dtype="bf16"), slope))
    _, checks = gate(compile_bundle(spec, arch, Compiler(), body="warp"), problem, CpuExecutor())   # uncached
    assert max(check.ratio for check in checks) > 1.5, [str(check) for check in checks]


@pytest.mark.parametrize("index", range(len(ALIBI)),
                         ids=[f"{s.dtype}-{s.mask}-cap{s.softcap:g}-{a}-{b}" for s, a, b in ALIBI])
def test_alibi_matches_the_oracle(compiler, index):
    """Slopes 2^(-8 (h + 1) / H) of the runtime head count: 4 query heads here, slopes 1/4 .. 1/256, so the
    bias reaches -10 over these lengths; a bundle without ALiBi fails the same problem."""
    spec, arch, body = ALIBI[index]
    bundle = compile_bundle(spec, arch, compiler, body=body)
    problem = make_problem(spec, ProblemSize(1, 4, 24, 40), seed=index, layout="bshd")
    _, checks = gate(bundle, problem, CpuExecutor(atomic_order="random", seed=index))
    assert all(check.passed for check in checks), [str(check) for check in checks]
    if index == 0:
        plain = compile_bundle(dataclasses.replace(spec, bias="none"), arch, compiler, body=body)
        assert not any(c.passed for c in gate(plain, problem, CpuExecutor())[1])


@pytest.mark.parametrize("index", range(len(BIAS)),
                         ids=[f"{s.dtype}-{s.mask}-dbias{int(s.dbias)}-{a}-{b}" for s, a, b in BIAS])
def test_bias_and_dbias_match_the_oracle(compiler, index):
    """dbias is summed over the dims the bias broadcasts over (batch 2, 4 query heads); a bundle
    without the bias fails the same problem, and one whose dbias is dropped is missing a gradient."""
    spec, arch, body = BIAS[index]
    broadcast = BROADCASTS[index % len(BROADCASTS)]
    bundle = compile_bundle(spec, arch, compiler, body=body)
    problem = make_problem(spec, ProblemSize(2, 4, 24, 40), seed=index, layout="bshd", broadcast=broadcast)
    grads, checks = gate(bundle, problem, CpuExecutor(atomic_order="random", seed=index))
    assert [c.name for c in checks] == ["dq", "dk", "dv"] + (["dbias"] if spec.dbias else [])
    assert grads.get("dbias", problem.tensors["bias"]).shape == problem.tensors["bias"].shape
    assert all(check.passed for check in checks), [str(check) for check in checks]
    if index == 0:
        plain = compile_bundle(dataclasses.replace(spec, bias="none", dbias=False), arch, compiler, body=body)
        inputs = {n: t for n, t in problem.tensors.items() if n != "bias"}
        assert not any(c.passed for c in problem.check(run_bundle(plain, CpuExecutor(), inputs), plain.numerics)
                       if c.name != "dbias")


@pytest.mark.parametrize("index", range(len(SLOPES)), ids=[f"{s.dtype}-{s.mask}-{a}-{b}" for s, a, b in SLOPES])
def test_alibi_slopes_and_their_gradient_match_the_oracle(compiler, index):
    """Slopes drawn around the standard ones, per batch ([B, H]) or shared ([1, H]); d(slopes) sums dS
    times -|distance| over every query and key of the head (and the batch, for [1, H])."""
    spec, arch, body = SLOPES[index]
    bundle = compile_bundle(spec, arch, compiler, body=body)
    problem = make_problem(spec, ProblemSize(2, 4, 24, 40), seed=index, layout="bshd",
                           broadcast=("batch", "none")[index % 2])
    grads, checks = gate(bundle, problem, CpuExecutor(atomic_order="random", seed=index))
    assert grads["dalibi_slopes"].shape == problem.tensors["alibi_slopes"].shape
    assert all(check.passed for check in checks), [str(check) for check in checks]
