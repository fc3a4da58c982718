"""Learnable attention sinks (dsinks) and the gradient through the lse (dlse): the oracle against finite
differences of its own forward, a two-chunk ring merge, and the kernels of every target and body in the
interpreter through the one gate, with masks, GQA, rows that see no key, varlen, deterministic mode and
the NaN classes of the lse (rows without keys given lse = -inf, heads whose sink is -inf)."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from fmha_mlir import oracle
from fmha_mlir.api import attention_bwd
from fmha_mlir.errors import SpecError
from fmha_mlir.numerics import SCALAR_ROWS
from fmha_mlir.problem import ProblemSize, make_problem, problem_of
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import DTYPES, AttentionBwdSpec, Mask
from fmha_mlir.tolerance import check_gradients
from fmha_mlir.varlen_problem import make_varlen_problem

from bundle_support import bundle_of, supported

TARGETS = (("gfx942", "warp"), ("sm_90", "warp"), ("sm_90", "tiled"), ("gfx942", "tiled"), ("gfx950", "tiled"))
# Which of the two features each case turns on: sinks alone, dlse alone, both.
FEATURES = (dict(sinks=True), dict(lse_grad=True), dict(sinks=True, lse_grad=True))
MASKS = (Mask("causal_bottom_right"), Mask("none"), Mask("sliding_window", 4, 1), Mask("causal_top_left"))


def _random(rng, *shape):
    return rng.standard_normal(shape)


# ---------------------------------------------------------------------------------------------------
# the oracle


@pytest.mark.parametrize("features,mask", list(itertools.product(FEATURES, MASKS)),
                         ids=[f"{'-'.join(f)}-{m}" for f, m in itertools.product(FEATURES, MASKS)])
def test_oracle_matches_finite_differences(features, mask):
    """Sq > Sk: under bottom-right and window masks some rows see no key; with a sink their lse is the
    sink and their dlse reaches dsinks (their only path), never NaN."""
    rng = np.random.default_rng(0)
    b, hq, g, sq, sk, d = 2, 4, 2, 7, 5, 8
    q, k, v, do = _random(rng, b, hq, sq, d), _random(rng, b, hq // g, sk, d), _random(rng, b, hq // g, sk, d), \
        _random(rng, b, hq, sq, d)
    extra = {}
    if features.get("sinks"):
        extra["sinks"] = rng.standard_normal(hq)
    if features.get("lse_grad"):
        extra["dlse"] = rng.standard_normal((b, hq, sq))
    error = oracle.finite_difference_check(q, k, v, do, mask=mask, scale=0.4, gqa_ratio=g, samples=8, **extra)
    assert error < 1e-6


def test_rows_without_keys_take_the_sink_alone():
    rng = np.random.default_rng(1)
    q, k, v = _random(rng, 1, 2, 6, 8), _random(rng, 1, 2, 3, 8), _random(rng, 1, 2, 3, 8)
    sinks = np.array([0.5, -2.0])
    fwd = oracle.forward(q, k, v, mask=Mask("causal_bottom_right"), scale=0.3, gqa_ratio=1, sinks=sinks)
    plain = oracle.forward(q, k, v, mask=Mask("causal_bottom_right"), scale=0.3, gqa_ratio=1)
    empty = ~np.isfinite(plain.lse)
    assert empty[0, :, :3].all() and not empty[0, :, 3:].any()
    np.testing.assert_array_equal(fwd.lse[empty], np.broadcast_to(sinks[None, :, None], fwd.lse.shape)[empty])
    assert np.all(fwd.o[empty] == 0)
    # every row's P sums to one minus the sink's share
    share = np.exp(sinks[None, :, None] - fwd.lse)
    np.testing.assert_allclose(fwd.p.sum(axis=-1) + share, 1.0, rtol=1e-12)


def test_a_minus_inf_sink_is_no_sink():
    """A head whose sink is -inf computes what it computes without sinks, its dsinks is 0, and its rows
    without keys (lse = +inf, the oracle's convention) stay free of NaN."""
    rng = np.random.default_rng(2)
    q, k, v, do = _random(rng, 1, 2, 6, 8), _random(rng, 1, 2, 3, 8), _random(rng, 1, 2, 3, 8), _random(rng, 1, 2, 6, 8)
    mask, sinks = Mask("causal_bottom_right"), np.array([-np.inf, 0.25])
    fwd = oracle.forward(q, k, v, mask=mask, scale=0.3, gqa_ratio=1, sinks=sinks)
    plain = oracle.forward(q, k, v, mask=mask, scale=0.3, gqa_ratio=1)
    np.testing.assert_array_equal(fwd.lse[:, 0], plain.lse[:, 0])
    grads = oracle.backward(q, k, v, fwd.o, do, fwd.lse, mask=mask, scale=0.3, gqa_ratio=1, sinks=sinks,
                            dlse=_random(rng, 1, 2, 6))
    assert all(np.isfinite(x).all() for x in grads.named().values())
    assert grads.dsinks[0] == 0 and grads.dsinks[1] != 0


def _ring_chunks(q, k, v, do, split, scale):
    """Two partial attentions over keys [0, split) and [split, Sk), merged by their lse as ring attention
    does; per chunk (k, v, o, dO, lse, dlse): the merged output's gradient carried back through the merge,
    dO_c = w_c dO and dlse_c = w_c dO . (O_c - O), w_c = exp(lse_c - lse)."""
    parts = [(k[:, :, s], v[:, :, s]) for s in (slice(0, split), slice(split, None))]
    fwds = [oracle.forward(q, kc, vc, mask=Mask("none"), scale=scale, gqa_ratio=1) for kc, vc in parts]
    lse = np.logaddexp(fwds[0].lse, fwds[1].lse)
    weights = [np.exp(f.lse - lse)[..., None] for f in fwds]
    out = sum(w * f.o for w, f in zip(weights, fwds))
    return [(kc, vc, f.o, w * do, f.lse, (w[..., 0] * np.sum(do * (f.o - out), axis=-1)))
            for (kc, vc), f, w in zip(parts, fwds, weights)]


def test_oracle_ring_merge_of_two_key_chunks_is_one_call():
    rng = np.random.default_rng(3)
    q, k, v, do = _random(rng, 1, 2, 5, 8), _random(rng, 1, 2, 9, 8), _random(rng, 1, 2, 9, 8), _random(rng, 1, 2, 5, 8)
    whole_fwd = oracle.forward(q, k, v, mask=Mask("none"), scale=0.3, gqa_ratio=1)
    whole = oracle.backward(q, k, v, whole_fwd.o, do, whole_fwd.lse, mask=Mask("none"), scale=0.3, gqa_ratio=1)
    chunks = [oracle.backward(q, kc, vc, oc, doc, lsec, mask=Mask("none"), scale=0.3, gqa_ratio=1, dlse=dlsec)
              for kc, vc, oc, doc, lsec, dlsec in _ring_chunks(q, k, v, do, 4, 0.3)]
    np.testing.assert_allclose(chunks[0].dq + chunks[1].dq, whole.dq, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([c.dk for c in chunks], axis=2), whole.dk, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([c.dv for c in chunks], axis=2), whole.dv, atol=1e-12)


# ---------------------------------------------------------------------------------------------------
# the kernels in the interpreter

# Every (arch, body) and dtype; the features and masks cycle so that each dtype and each target sees
# every feature.
KERNELS = [(AttentionBwdSpec(dtype, 64, gqa_ratio=2, mask=MASKS[(t + d) % len(MASKS)],
                             **FEATURES[(t + d) % len(FEATURES)]), arch, body)
           for (t, (arch, body)), (d, dtype) in itertools.product(enumerate(TARGETS), enumerate(DTYPES))
           if supported(AttentionBwdSpec(dtype, 64), arch, body)]


@pytest.mark.parametrize("index", range(len(KERNELS)),
                         ids=[f"{s.dtype}-{s.mask}-sinks{int(s.sinks)}-dlse{int(s.lse_grad)}-{a}-{b}"
                              for s, a, b in KERNELS])
def test_kernel_matches_the_oracle(index):
    """B = 2, 4 query heads on 2 kv heads, Sq 24 > Sk 20 (rows without keys under bottom-right and window
    masks), BSHD storage, atomics in a random order."""
    spec, arch, body = KERNELS[index]
    bundle = bundle_of(spec, arch, body)
    problem = make_problem(spec, ProblemSize(2, 4, 24, 20), seed=index, layout="bshd")
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=index), problem.tensors)
    checks = problem.check(grads, bundle.numerics)
    assert [c.name for c in checks] == ["dq", "dk", "dv"] + (["dsinks"] if spec.sinks else [])
    assert all(c.passed for c in checks), [str(c) for c in checks]


@pytest.mark.parametrize("arch,body", [("sm_90", "tiled"), ("gfx942", "warp")])
def test_kernel_without_the_feature_fails_the_problem(arch, body):
    """The gate tells the features apart: a bundle built without lse_grad, run on a problem with dlse,
    fails dQ and dK; one whose dsinks is dropped is missing a gradient."""
    spec = AttentionBwdSpec("bf16", 64, mask=Mask("causal_top_left"), sinks=True, lse_grad=True)
    problem = make_problem(spec, ProblemSize(1, 2, 24, 24), seed=5)
    plain = bundle_of(dataclasses.replace(spec, lse_grad=False), arch, body)
    grads = run_bundle(plain, CpuExecutor(), {n: t for n, t in problem.tensors.items() if n != "dlse"})
    failed = {c.name for c in problem.check(grads, plain.numerics) if not c.passed}
    assert {"dq", "dk"} <= failed
    with pytest.raises(SpecError, match="dsinks"):
        problem.check({n: g for n, g in grads.items() if n != "dsinks"} | {"dsinks": grads["dsinks"][:1]},
                      plain.numerics)


@pytest.mark.parametrize("arch", ["sm_90", "gfx950"])
def test_deterministic_dsinks_are_bitwise_and_match_the_oracle(arch):
    spec = AttentionBwdSpec("bf16", 64, gqa_ratio=2, mask=Mask("causal_bottom_right"), deterministic=True, sinks=True,
                            lse_grad=True)
    bundle = bundle_of(spec, arch, "tiled")
    assert "dsinks_acc" in bundle.manifest["buffers"]
    problem = make_problem(spec, ProblemSize(2, 4, 40, 24), seed=7)
    runs = [run_bundle(bundle, CpuExecutor(atomic_order="random", seed=seed), problem.tensors) for seed in (1, 2)]
    for name in ("dq", "dk", "dv", "dsinks"):
        assert runs[0][name].tobytes() == runs[1][name].tobytes(), name
    checks = problem.check(runs[0], bundle.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]


NAN_CASES = [(arch, body) for arch, body in TARGETS]


@pytest.mark.parametrize("arch,body", NAN_CASES, ids=[f"{a}-{b}" for a, b in NAN_CASES])
def test_rows_without_keys_and_minus_inf_sinks_stay_finite(arch, body):
    """Head 0's sink is -inf: its rows that see no key have an infinite lse, given to the kernels as -inf
    (torch's convention; the oracle takes +inf); head 1's such rows have lse = sink, and their dlse is
    all their dsinks term."""
    spec = AttentionBwdSpec("f16", 64, mask=Mask("causal_bottom_right"), sinks=True, lse_grad=True)
    size = ProblemSize(1, 2, 24, 8)
    drawn = make_problem(spec, size, seed=11)
    values = {n: drawn.values[n] for n in ("q", "k", "v", "do", "dlse")}
    values["sinks"] = np.array([-np.inf, 0.5])
    extra = {"sinks": values["sinks"].astype(np.float32), "dlse": drawn.tensors["dlse"]}
    problem = problem_of(spec, size, values, extra)
    lse = problem.tensors["lse"]
    assert np.isinf(lse[0, 0, :16]).all() and np.isfinite(lse[0, 1]).all()
    problem.tensors["lse"] = np.where(np.isinf(lse), -np.inf, lse).astype(np.float32)
    bundle = bundle_of(spec, arch, body)
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=3), problem.tensors)
    checks = problem.check(grads, bundle.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]
    assert grads["dsinks"][0] == 0


@pytest.mark.parametrize("arch,body,dtype", [("sm_90", "tiled", "bf16"), ("gfx942", "warp", "f32"),
                                             ("gfx950", "tiled", "f16")])
def test_varlen_sinks_and_dlse_per_sequence(arch, body, dtype):
    """One [Hq] sinks tensor for every sequence; a sequence without keys (lse = sink) adds its dlse to
    dsinks, one without queries nothing."""
    spec = AttentionBwdSpec(dtype, 64, gqa_ratio=2, mask=Mask("causal_bottom_right"), varlen=True, sinks=True,
                            lse_grad=True)
    bundle = bundle_of(spec, arch, body)
    problem = make_varlen_problem(spec, (0, 1, 37, 70), (5, 0, 90, 64), heads_q=4, seed=3)
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=4), problem.tensors, problem.scalars)
    checks = problem.check(grads, bundle.numerics)
    assert [c.name for c in checks] == ["dq", "dk", "dv", "dsinks"]
    assert all(c.passed for c in checks), [str(c) for c in checks]


def test_kernel_ring_merge_of_two_key_chunks_is_one_call():
    """Ring attention's merge through the API: two calls, one per key chunk, each given its share of dO
    and its dlse, sum to the gradients of one call over all keys (the gate: the float64 oracle of the
    whole problem, the f32 reference of the two chunks as the kernels take them)."""
    rng = np.random.default_rng(4)
    q, k, v, do = (rng.standard_normal(s) for s in ((1, 2, 20, 64), (1, 2, 28, 64), (1, 2, 28, 64), (1, 2, 20, 64)))
    q, k, v, do = (x.astype(np.float32).astype(np.float64) for x in (q, k, v, do))
    scale = 0.125
    whole_fwd = oracle.forward(q, k, v, mask=Mask("none"), scale=scale, gqa_ratio=1)
    whole = oracle.backward(q, k, v, whole_fwd.o, do, whole_fwd.lse, mask=Mask("none"), scale=scale, gqa_ratio=1)
    kernel, lowp = [], []
    for kc, vc, oc, doc, lsec, dlsec in _ring_chunks(q, k, v, do, 12, scale):
        inputs = [x.astype(np.float32) for x in (q, kc, vc, oc, doc, lsec, dlsec)]
        kernel.append(attention_bwd(*inputs[:6], dlse=inputs[6], scale=scale, executor="cpu", arch="gfx942"))
        lowp.append(oracle.lowp_backward(*inputs[:6], dtype="f32", mask=Mask("none"), scale=scale, gqa_ratio=1,
                                         numerics=SCALAR_ROWS, dlse=inputs[6]))
    merged = {"dq": kernel[0][0] + kernel[1][0], "dk": np.concatenate([kernel[0][1], kernel[1][1]], axis=2),
              "dv": np.concatenate([kernel[0][2], kernel[1][2]], axis=2)}
    reference = oracle.Gradients(lowp[0].dq + lowp[1].dq, np.concatenate([lowp[0].dk, lowp[1].dk], axis=2),
                                 np.concatenate([lowp[0].dv, lowp[1].dv], axis=2), whole.d)
    checks = check_gradients(merged, whole, reference, "f32", 64)
    assert all(c.passed for c in checks), [str(c) for c in checks]


def test_api_returns_dsinks_last_and_refuses_bad_shapes():
    rng = np.random.default_rng(5)
    q, k, v, do = (rng.standard_normal(s).astype(np.float32) for s in ((1, 2, 9, 64), (1, 2, 5, 64), (1, 2, 5, 64),
                                                                         (1, 2, 9, 64)))
    sinks = np.array([0.3, -0.7], np.float32)
    fwd = oracle.forward(q, k, v, mask=Mask("causal_bottom_right"), scale=0.125, gqa_ratio=1, sinks=sinks)
    o, lse = fwd.o.astype(np.float32), fwd.lse.astype(np.float32)
    out = attention_bwd(q, k, v, o, do, lse, mask="bottom_right", scale=0.125, sinks=sinks, executor="cpu",
                        bias="alibi", alibi_slopes=np.array([0.5, 0.25], np.float32), dbias=True)
    assert [x.shape for x in out[3:]] == [(2,), (2,)] and out[4].dtype == np.float32
    with pytest.raises(SpecError, match=r"sinks.*\[heads_q\]"):
        attention_bwd(q, k, v, o, do, lse, sinks=sinks[None], executor="cpu")
    with pytest.raises(SpecError, match="dlse"):
        attention_bwd(q, k, v, o, do, lse, dlse=lse[0], executor="cpu")


def test_api_without_keys_gives_the_sinks_their_dlse():
    """No key at all: each row's softmax is its sink alone (lse = sink, O = 0), so dsinks = sum dlse."""
    rng = np.random.default_rng(6)
    q, do = rng.standard_normal((2, 2, 3, 64)).astype(np.float32), rng.standard_normal((2, 2, 3, 64)).astype(np.float32)
    k = np.zeros((2, 2, 0, 64), np.float32)
    sinks, dlse = np.array([1.0, -1.0], np.float32), rng.standard_normal((2, 2, 3)).astype(np.float32)
    lse = np.broadcast_to(sinks[None, :, None], (2, 2, 3)).astype(np.float32)
    out = attention_bwd(q, k, k, np.zeros_like(q), do, lse, sinks=sinks, dlse=dlse, executor="cpu")
    np.testing.assert_allclose(out[3], dlse.sum(axis=(0, 2)), rtol=1e-6)
    assert not out[0].any()


def test_main_job_flags(capsys):
    """fmha-bwd --sinks --dlse builds the spec with both and judges dsinks beside dq, dk, dv."""
    from fmha_mlir.tools import main_job

    argv = ["--target", "gfx942", "--body", "warp", "--executor", "cpu", "--dtype", "f32", "--seqlen-q", "9",
            "--seqlen-k", "5", "--sinks", "--dlse"]
    assert main_job.main(argv) == 0
    out, err = capsys.readouterr()
    assert " sinks dlse |" in out and "_sinks_dlse on cpu" in err
    assert [line.split()[5] for line in out.splitlines() if line.startswith("gfx942")] == ["dq", "dk", "dv", "dsinks"]
