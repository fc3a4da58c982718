"""Inputs that used to give silent NaN gradients, on every target and body in the interpreter, through
the one gate against the float64 oracle (outputs must also be finite):

- rows that see no key given lse = -inf (torch.logsumexp's and FlexAttention's convention) as well as +inf;
- very few keys with negative scores: the keys past seqlen_k (zero-filled) of a tail tile would get
  P = exp(0 - lse), large for lse < 0, and dS would overflow (tail tiles are cut tiles);
- negative ALiBi slopes: the bias grows with the distance, also at the padded positions of a tail tile.

Plus property-based cases of extreme but finite values (module end).
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fmha_mlir.extreme_inputs import lse_minus_inf, scaled_problem
from fmha_mlir.problem import ProblemSize
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.varlen_problem import make_varlen_problem

from bundle_support import bundle_of, supported

TARGETS = (("gfx942", "warp"), ("sm_90", "warp"), ("sm_90", "tiled"), ("gfx942", "tiled"), ("gfx950", "tiled"))


def cases(specs):
    return [(spec, arch, body) for spec, (arch, body) in itertools.product(specs, TARGETS)
            if supported(spec, arch, body)]


def case_id(case) -> str:
    spec, arch, body = case
    return f"{spec.dtype}-{spec.mask}-{arch}-{body}"


def gate(spec, arch, body, prob, lse=None, seed=0):
    """Run the bundle on the problem (with `lse` in place of the problem's, if given): the gradients pass
    the gate, which fails any gradient that is not finite."""
    bundle = bundle_of(spec, arch, body)
    tensors = prob.tensors if lse is None else dict(prob.tensors, lse=lse)
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=seed), tensors)
    checks = prob.check(grads, bundle.numerics)
    assert all(check.passed for check in checks), [str(check) for check in checks]


EMPTY_ROWS = cases([AttentionBwdSpec(dtype, 64, gqa_ratio=2, mask=Mask("causal_bottom_right"))
                    for dtype in ("f16", "bf16")])


@pytest.mark.parametrize("case", EMPTY_ROWS, ids=case_id)
def test_rows_that_see_no_key_accept_lse_minus_inf(case):
    """seqlen_q > seqlen_k bottom-right: the first rows see no key; their lse given as -inf."""
    spec, arch, body = case
    prob = scaled_problem(spec, ProblemSize(1, 2, 9, 5), seed=1)
    assert np.isposinf(prob.tensors["lse"]).any(), "the problem must have rows that see no key"
    gate(spec, arch, body, prob, lse=lse_minus_inf(prob.tensors["lse"]))


FEW_KEYS = cases([AttentionBwdSpec("f16", 64, mask=Mask("none"))])


@pytest.mark.parametrize("keys,seed", ((1, 1), (2, 1), (3, 0)))   # seeds whose problem has an lse below -10
@pytest.mark.parametrize("case", FEW_KEYS, ids=case_id)
def test_very_few_keys_with_negative_scores(case, keys, seed):
    """q, k, v of scale 3 and 1-3 keys: rows of lse well below 0, where a padded key's exp(0 - lse)
    times D overflows f16."""
    spec, arch, body = case
    prob = scaled_problem(spec, ProblemSize(1, 2, 13, keys), seed=seed, magnitude=3.0)
    assert prob.tensors["lse"].min() < -10, "the problem must have rows of very negative lse"
    gate(spec, arch, body, prob)


@pytest.mark.parametrize("case", cases([AttentionBwdSpec("f16", 64, mask=Mask("none"), varlen=True)]), ids=case_id)
def test_very_few_keys_with_negative_scores_varlen(case):
    """The same packed: sequences of 1-3 keys (and one without queries) share the padded tail tiles."""
    spec, arch, body = case
    draw = functools.partial(scaled_problem, magnitude=3.0)
    prob = make_varlen_problem(spec, (0, 13, 11, 9), (2, 1, 3, 2), heads_q=2, seed=1, draw=draw)
    assert min(part.tensors["lse"].min() for part in prob.parts if part is not None) < -10
    outputs = run_bundle(bundle_of(spec, arch, body), CpuExecutor(), prob.tensors, prob.scalars)
    checks = prob.check(outputs, bundle_of(spec, arch, body).numerics)
    assert all(check.passed for check in checks), [str(check) for check in checks]


NEGATIVE_SLOPES = cases([AttentionBwdSpec(dtype, 64, mask=Mask(mask), bias="alibi", alibi_slopes=True, dbias=True)
                         for dtype, mask in (("f16", "none"), ("bf16", "causal_top_left"))])


@pytest.mark.parametrize("seqlens", ((9, 5), (5, 9)))
@pytest.mark.parametrize("case", NEGATIVE_SLOPES, ids=case_id)
def test_negative_alibi_slopes(case, seqlens):
    """slopes [-0.5, -0.25] (finite, legal): the bias grows with the distance, at padded positions too."""
    spec, arch, body = case
    prob = scaled_problem(spec, ProblemSize(1, 2, *seqlens), seed=3, slopes=[-0.5, -0.25])
    gate(spec, arch, body, prob)


# --- property-based: extreme but finite values ---------------------------------------------------------

# Derandomized (the same examples every run) and without shrinking: an example costs a compile and an
# interpreter run, and the failing example is printed as drawn.
BOUNDED = dict(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow],
               phases=[Phase.explicit, Phase.generate])


@settings(max_examples=20, **BOUNDED)
@given(target=st.sampled_from(TARGETS), dtype=st.sampled_from(["f16", "bf16"]),
       mask=st.sampled_from([Mask("none"), Mask("causal_bottom_right"), Mask("causal_top_left"),
                             Mask("sliding_window", 2, 0)]),
       seqlen_q=st.integers(1, 12), seqlen_k=st.integers(2, 3),
       magnitude=st.sampled_from([1.0, 3.0, 100.0]), negative_slopes=st.booleans(), minus_inf=st.booleans(),
       seed=st.integers(0, 2**16))
def test_extreme_values_pass_the_gate(target, dtype, mask, seqlen_q, seqlen_k, magnitude, negative_slopes,
                                      minus_inf, seed):
    """Scores up to ~1e4 (q, k of magnitude 100) with the lse the oracle's forward gives them, 2-3 keys,
    negative ALiBi slopes, rows that see no key (bottom-right and window masks with seqlen_q > seqlen_k)
    in either lse convention: finite gradients within the gate, on every target."""
    arch, body = target
    spec = AttentionBwdSpec(dtype, 64, mask=mask, bias="alibi" if negative_slopes else "none",
                            alibi_slopes=negative_slopes)
    if not supported(spec, arch, body):
        return
    # v and dO stay of order 1: gradients of order |q| |k| |v| |dO| would overflow f16 by themselves.
    prob = scaled_problem(spec, ProblemSize(1, 2, seqlen_q, seqlen_k), seed=seed, magnitude=magnitude,
                          slopes=[-0.5, -0.25] if negative_slopes else None, value_magnitude=0.5)
    lse = prob.tensors["lse"]
    gate(spec, arch, body, prob, lse=lse_minus_inf(lse) if minus_inf else lse, seed=seed)


def test_one_key_dk_is_a_cancelling_sum_within_the_rounding_model():
    """bf16, one key, scores of order 1: P = 1, so dS = P (dP - D) is the f32 rounding of two equal inner
    products and dK one cancelling sum of it; the gate's model of dS's rounding (tolerance) bounds it."""
    spec = AttentionBwdSpec("bf16", 64, mask=Mask("none"))
    gate(spec, "sm_90", "tiled", scaled_problem(spec, ProblemSize(1, 2, 9, 1), seed=9, value_magnitude=0.5), seed=9)
