"""The NumPy oracles (fmha_mlir.oracle) and test-problem generation (fmha_mlir.problem)."""
import math

import numpy as np
import pytest

from fmha_mlir import oracle
from fmha_mlir.dtypes import from_storage, round_to
from fmha_mlir.errors import SpecError
from fmha_mlir.numerics import MATRIX_K16, SCALAR_ROWS
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.spec import AttentionBwdSpec, Mask

# Central differences in float64 land within ~1e-8 of a right gradient; a 1% error gives ~1e-2.
FD_TOLERANCE = 1e-6

MASKS = [
    Mask(),
    Mask("causal_top_left"),
    Mask("causal_bottom_right"),
    Mask("sliding_window", 2, 1),
    Mask("sliding_window", 1, -1),
]


def random_inputs(seed=0, batch=2, heads_q=4, gqa_ratio=1, seqlen_q=5, seqlen_k=7, hdim_q=8, hdim_v=6):
    rng = np.random.default_rng(seed)
    heads_kv = heads_q // gqa_ratio
    return (rng.standard_normal((batch, heads_q, seqlen_q, hdim_q)),
            rng.standard_normal((batch, heads_kv, seqlen_k, hdim_q)),
            rng.standard_normal((batch, heads_kv, seqlen_k, hdim_v)),
            rng.standard_normal((batch, heads_q, seqlen_q, hdim_v)))


def forward_and_backward(q, k, v, do, **options):
    fwd = oracle.forward(q, k, v, **options)
    return fwd, oracle.backward(q, k, v, fwd.o, do, fwd.lse, **options)


# --- the oracle against finite differences ---------------------------------------------------------

@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize("gqa_ratio", [1, 2, 4])
@pytest.mark.parametrize("seqlen_q,seqlen_k", [(5, 7), (7, 4)])
def test_backward_matches_finite_differences(mask, gqa_ratio, seqlen_q, seqlen_k):
    q, k, v, do = random_inputs(gqa_ratio=gqa_ratio, seqlen_q=seqlen_q, seqlen_k=seqlen_k)
    err = oracle.finite_difference_check(q, k, v, do, mask=mask, scale=0.4, gqa_ratio=gqa_ratio)
    assert err < FD_TOLERANCE


BIASES = {
    "per_head": lambda rng: rng.standard_normal((4, 5, 7)),
    "per_batch_broadcast_heads": lambda rng: rng.standard_normal((2, 1, 5, 7)),
    "shared": lambda rng: rng.standard_normal((5, 7)),
    "alibi": lambda rng: oracle.alibi_bias(oracle.alibi_slopes(4), 5, 7),
}


@pytest.mark.parametrize("kind", BIASES)
def test_bias_and_dbias_match_finite_differences(kind):
    bias = BIASES[kind](np.random.default_rng(1))
    q, k, v, do = random_inputs(gqa_ratio=2)
    options = dict(mask=Mask("causal_bottom_right"), scale=0.4, gqa_ratio=2)
    err = oracle.finite_difference_check(q, k, v, do, bias=bias, samples=10, **options)
    assert err < FD_TOLERANCE
    _, grads = forward_and_backward(q, k, v, do, bias=bias, **options)
    assert grads.dbias.shape == bias.shape


@pytest.mark.parametrize("shape", [(4,), (1, 4), (2, 4)], ids=["H", "1xH", "BxH"])
def test_alibi_slope_gradient_matches_finite_differences(shape):
    """d(slopes) = sum over q, k of dS * -|q + Sk - Sq - k|, summed over the batch for [H] slopes."""
    slopes = oracle.alibi_slopes(4) * np.random.default_rng(3).uniform(0.5, 2.0, shape)
    q, k, v, do = random_inputs(gqa_ratio=2)
    options = dict(mask=Mask("causal_top_left"), scale=0.4, gqa_ratio=2, softcap=3.0)
    assert oracle.finite_difference_check(q, k, v, do, alibi_slopes=slopes, samples=8, **options) < FD_TOLERANCE
    _, grads = forward_and_backward(q, k, v, do, alibi_slopes=slopes, **options)
    assert grads.dalibi_slopes.shape == shape and grads.dbias is None
    biased = forward_and_backward(q, k, v, do, bias=oracle.alibi_bias(slopes, 5, 7), **options)[1]
    assert np.allclose(grads.dq, biased.dq) and np.allclose(grads.dk, biased.dk)


@pytest.mark.parametrize("softcap", [0.5, 3.0])
@pytest.mark.parametrize("with_bias", [False, True])
def test_softcap_matches_finite_differences(softcap, with_bias):
    """Scores softcap * tanh(scale q.k / softcap) (+ bias after it): dQ, dK through 1 - tanh^2, dbias
    is dS of the final scores."""
    q, k, v, do = random_inputs(gqa_ratio=2)
    bias = np.random.default_rng(2).standard_normal((4, 5, 7)) if with_bias else None
    options = dict(mask=Mask("causal_bottom_right"), scale=0.9, gqa_ratio=2, softcap=softcap)
    assert oracle.finite_difference_check(q, k, v, do, bias=bias, samples=10, **options) < FD_TOLERANCE
    x = (q @ np.swapaxes(np.repeat(k, 2, axis=1), -1, -2)) * 0.9
    assert np.max(np.abs(x)) > softcap   # tanh is far from linear on these scores


def test_same_dtype_reference_takes_tanh_exactly():
    """The gate's f32 reference rounds tanh(s / c) once (np.tanh in f32), as exact math does: scores of
    order 1 to 4 at a cap of 30, where the exponential form 1 - 2 / (e + 1) is 100+ ulps off; and it
    saturates to +-1 without NaN."""
    s = np.concatenate([np.linspace(-4, 4, 4001), [-1e4, 1e4]]).reshape(1, 1, -1, 1)
    one = np.ones((1, 1, 1, 1))
    _, t = oracle._scores(s.astype(np.float32), one.astype(np.float32), mask=Mask(), scale=1.0, bias=None,
                          acc=np.float32, softcap=30.0)
    t = t.ravel()
    y = s.ravel().astype(np.float32) / np.float32(30.0)   # the f32 argument it takes
    exact = np.tanh(y.astype(np.float64))
    assert t.dtype == np.float32
    assert np.max(np.abs(t - exact) / np.spacing(np.abs(exact).astype(np.float32))) <= 1.0
    assert t[-2:].tolist() == [-1.0, 1.0]


def test_finite_difference_check_catches_a_wrong_gradient(monkeypatch):
    q, k, v, do = random_inputs()
    right = oracle.backward

    def one_percent_off(*args, **kwargs):
        g = right(*args, **kwargs)
        return oracle.Gradients(g.dq * 1.01, g.dk, g.dv, g.d, g.dbias)

    monkeypatch.setattr(oracle, "backward", one_percent_off)
    assert oracle.finite_difference_check(q, k, v, do, mask=Mask(), scale=0.4, gqa_ratio=1) > 1e-3


def test_dbias_is_ds_summed_over_batch():
    """dbias = sum over batch of P * (dP - D) for a [heads, Sq, Sk] bias (no scale)."""
    q, k, v, do = random_inputs(seqlen_q=6, seqlen_k=6)
    bias = np.random.default_rng(3).standard_normal((4, 6, 6))
    fwd, grads = forward_and_backward(q, k, v, do, mask=Mask(), scale=0.3, gqa_ratio=1, bias=bias)
    dp = do @ np.swapaxes(v, -1, -2)
    d = np.sum(do * fwd.o, axis=-1, keepdims=True)
    np.testing.assert_allclose(grads.dbias, (fwd.p * (dp - d)).sum(axis=0), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("softcap,with_bias", [(0.0, True), (2.0, False)])
def test_ds_rounding_magnitudes_equal_a_loop(softcap, with_bias):
    """The gate's model of dS's f32 rounding (fmha_mlir.tolerance), score by score with Python floats:
    r = P (sum_d |dO V| + sum_d |dO O|), times 1 - tanh^2 under softcap for dQ and dK, carried as |dS|
    would be: scale sum_j r |k| (dQ), scale sum over the GQA group and rows of r |q| (dK), r summed
    over the batch the bias broadcasts over (dbias, without the softcap factor)."""
    q, k, v, do = random_inputs(heads_q=4, gqa_ratio=2)
    bias = np.random.default_rng(3).standard_normal((4, 5, 7)) if with_bias else None
    scale, ratio = 0.7, 2
    fwd, grads = forward_and_backward(q, k, v, do, mask=Mask("causal_bottom_right"), scale=scale, gqa_ratio=ratio,
                                      bias=bias, softcap=softcap)
    dq, dk, r_score = np.zeros_like(q), np.zeros_like(k), np.zeros(fwd.p.shape)
    for b, h, i, j in np.ndindex(*fwd.p.shape):
        kv = h // ratio
        r = fwd.p[b, h, i, j] * (sum(abs(x * y) for x, y in zip(do[b, h, i], v[b, kv, j]))
                                 + sum(abs(x * y) for x, y in zip(do[b, h, i], fwd.o[b, h, i])))
        r_score[b, h, i, j] = r
        if softcap:
            r *= 1 - math.tanh(scale * float(q[b, h, i] @ k[b, kv, j]) / softcap) ** 2
        dq[b, h, i] += scale * r * np.abs(k[b, kv, j])
        dk[b, kv, j] += scale * r * np.abs(q[b, h, i])
    assert set(grads.term_magnitudes) == ({"dq", "dk", "dbias"} if with_bias else {"dq", "dk"})
    np.testing.assert_allclose(grads.term_magnitudes["dq"], dq, rtol=1e-12)
    np.testing.assert_allclose(grads.term_magnitudes["dk"], dk, rtol=1e-12)
    if with_bias:
        np.testing.assert_allclose(grads.term_magnitudes["dbias"], r_score.sum(axis=0), rtol=1e-12)
    assert np.all(r_score[..., 0, 3:] == 0) and np.all(r_score[..., 0, :3] > 0)   # row 0 sees keys 0-2


# --- the forward against an independent loop -------------------------------------------------------

def naive_forward(q, k, v, *, mask, scale, gqa_ratio, bias):
    """One row at a time, with Python floats: the textbook softmax over the visible keys."""
    batch, heads_q, seqlen_q, _ = q.shape
    seqlen_k, hdim_v = k.shape[2], v.shape[3]
    o = np.zeros((batch, heads_q, seqlen_q, hdim_v))
    lse = np.full((batch, heads_q, seqlen_q), np.inf)
    bias = np.broadcast_to(bias, (batch, heads_q, seqlen_q, seqlen_k))
    for b in range(batch):
        for h in range(heads_q):
            kv = h // gqa_ratio
            for i in range(seqlen_q):
                keys = [j for j in range(seqlen_k) if mask.visible(i, j, seqlen_q, seqlen_k)]
                if not keys:
                    continue
                scores = {j: scale * float(q[b, h, i] @ k[b, kv, j]) + bias[b, h, i, j] for j in keys}
                top = max(scores.values())
                total = sum(math.exp(s - top) for s in scores.values())
                lse[b, h, i] = top + math.log(total)
                o[b, h, i] = sum(math.exp(scores[j] - lse[b, h, i]) * v[b, kv, j] for j in keys)
    return o, lse


@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_forward_matches_a_row_by_row_softmax(mask):
    q, k, v, _ = random_inputs(batch=1, gqa_ratio=2, seqlen_q=6, seqlen_k=4)
    bias = np.random.default_rng(2).standard_normal((4, 6, 4))
    options = dict(mask=mask, scale=0.35, gqa_ratio=2, bias=bias)
    fwd = oracle.forward(q, k, v, **options)
    o, lse = naive_forward(q, k, v, **options)
    np.testing.assert_allclose(fwd.o, o, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(np.isinf(fwd.lse), np.isinf(lse))
    np.testing.assert_allclose(fwd.lse[np.isfinite(lse)], lse[np.isfinite(lse)], rtol=1e-12)


# --- masks -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("seqlen_q,seqlen_k", [(6, 6), (4, 9), (9, 4)])
def test_causal_masks_equal_their_index_comparisons(seqlen_q, seqlen_k):
    row = np.arange(seqlen_q).reshape(-1, 1)
    col = np.arange(seqlen_k).reshape(1, -1)
    top_left = col <= row
    bottom_right = col <= row + (seqlen_k - seqlen_q)
    np.testing.assert_array_equal(oracle.visible_matrix(Mask("causal_top_left"), seqlen_q, seqlen_k), top_left)
    np.testing.assert_array_equal(oracle.visible_matrix(Mask("causal_bottom_right"), seqlen_q, seqlen_k),
                                  bottom_right)
    assert oracle.visible_matrix(Mask(), seqlen_q, seqlen_k).all()


@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_probabilities_are_zero_exactly_where_masked(mask):
    q, k, v, _ = random_inputs(seqlen_q=6, seqlen_k=8)
    p = oracle.forward(q, k, v, mask=mask, scale=0.4, gqa_ratio=1).p
    visible = oracle.visible_matrix(mask, 6, 8)
    assert np.all(p[..., ~visible] == 0)
    assert np.all(p[..., visible] > 0)


# --- rows that see no key --------------------------------------------------------------------------

EMPTY_ROW_CASES = [
    # (mask, Sq, Sk, query rows that see no key, keys no query sees)
    (Mask("causal_bottom_right"), 7, 4, [0, 1, 2], []),
    (Mask("sliding_window", 0, 0), 6, 3, [0, 1, 2], []),
    (Mask("sliding_window", 0, 0), 3, 6, [], [0, 1, 2]),
    (Mask("sliding_window", 1, 0), 8, 4, [0, 1, 2, 3], []),
]


@pytest.mark.filterwarnings("error")  # an inf - inf or 0 / 0 on the way would warn
@pytest.mark.parametrize("mask,seqlen_q,seqlen_k,empty_rows,unseen_keys", EMPTY_ROW_CASES)
def test_empty_rows_have_infinite_lse_and_zero_gradients(mask, seqlen_q, seqlen_k, empty_rows, unseen_keys):
    q, k, v, do = random_inputs(gqa_ratio=2, seqlen_q=seqlen_q, seqlen_k=seqlen_k)
    options = dict(mask=mask, scale=0.4, gqa_ratio=2)
    fwd, grads = forward_and_backward(q, k, v, do, **options)
    seen_rows = np.setdiff1d(np.arange(seqlen_q), empty_rows)
    assert np.all(fwd.lse[:, :, empty_rows] == np.inf)
    assert np.all(np.isfinite(fwd.lse[:, :, seen_rows]))
    assert np.all(fwd.o[:, :, empty_rows] == 0)
    assert np.all(grads.dq[:, :, empty_rows] == 0) and np.all(grads.d[:, :, empty_rows] == 0)
    assert np.all(grads.dk[:, :, unseen_keys] == 0) and np.all(grads.dv[:, :, unseen_keys] == 0)
    lowp = oracle.lowp_backward(q, k, v, round_to(fwd.o, "bf16"), do, fwd.lse.astype(np.float32),
                                dtype="bf16", **options)
    for g in (*grads.named().values(), *lowp.named().values()):
        assert np.all(np.isfinite(g))
    assert oracle.finite_difference_check(q, k, v, do, **options) < FD_TOLERANCE


# --- deterministic dQ ------------------------------------------------------------------------------

@pytest.mark.parametrize("tile_k", [1, 3, 7, 100])
def test_deterministic_dq_equals_backward_dq(tile_k):
    q, k, v, do = random_inputs(gqa_ratio=2, seqlen_q=5, seqlen_k=7)
    options = dict(mask=Mask("causal_bottom_right"), scale=0.4, gqa_ratio=2)
    fwd, grads = forward_and_backward(q, k, v, do, **options)
    dq, buffers = oracle.backward_deterministic_dq(q, k, v, fwd.o, do, fwd.lse, tile_k=tile_k, **options)
    assert buffers.shape == (-(-7 // tile_k), *q.shape)
    np.testing.assert_allclose(dq, grads.dq, rtol=1e-12, atol=1e-14)


def test_deterministic_dq_buffer_of_unseen_keys_is_zero():
    q, k, v, do = random_inputs(seqlen_q=3, seqlen_k=8)
    options = dict(mask=Mask("causal_top_left"), scale=0.4, gqa_ratio=1)
    fwd = oracle.forward(q, k, v, **options)
    _, buffers = oracle.backward_deterministic_dq(q, k, v, fwd.o, do, fwd.lse, tile_k=3, **options)
    assert np.any(buffers[0] != 0)
    assert np.all(buffers[1:] == 0)   # keys 3..7 are after every query row


def test_deterministic_dq_rejects_a_bad_tile():
    q, k, v, do = random_inputs()
    with pytest.raises(SpecError, match="tile_k"):
        oracle.backward_deterministic_dq(q, k, v, do, do, np.zeros(q.shape[:3]), mask=Mask(), scale=0.4,
                                         gqa_ratio=1, tile_k=0)


# --- the low-precision reference -------------------------------------------------------------------

@pytest.mark.parametrize("dtype,low,high", [("f16", 1e-5, 1e-2), ("bf16", 1e-4, 5e-2), ("f32", 0.0, 1e-5)])
def test_lowp_backward_is_close_to_the_oracle_by_its_precision(dtype, low, high):
    q, k, v, do = (round_to(x, dtype) for x in random_inputs(gqa_ratio=2, seqlen_q=16, seqlen_k=16))
    options = dict(mask=Mask("causal_top_left"), scale=0.3, gqa_ratio=2)
    fwd = oracle.forward(q, k, v, **options)
    o, lse = round_to(fwd.o, dtype), fwd.lse.astype(np.float32)
    exact = oracle.backward(q, k, v, o, do, lse, **options)
    lowp = oracle.lowp_backward(q, k, v, o, do, lse, dtype=dtype, **options)
    for name, g in exact.named().items():
        rel = np.max(np.abs(lowp.named()[name] - g)) / np.max(np.abs(g))
        assert low <= rel < high, name
        np.testing.assert_array_equal(round_to(lowp.named()[name], dtype), lowp.named()[name])
    assert all(g.dtype == np.float64 for g in (*lowp.named().values(), lowp.d))  # values, whatever dtype


# --- input validation ------------------------------------------------------------------------------

def test_mismatched_shapes_name_the_tensor():
    q, k, v, do = random_inputs(gqa_ratio=2)
    with pytest.raises(SpecError, match="gqa_ratio = 3"):
        oracle.forward(q, k, v, mask=Mask(), scale=0.4, gqa_ratio=3)
    with pytest.raises(SpecError, match="lse: has shape"):
        oracle.backward(q, k, v, do, do, np.zeros((2, 4, 6)), mask=Mask(), scale=0.4, gqa_ratio=2)
    with pytest.raises(SpecError, match="bias: shape"):
        oracle.forward(q, k, v, mask=Mask(), scale=0.4, gqa_ratio=2, bias=np.zeros((3, 5, 7)))
    with pytest.raises(SpecError, match="scale"):
        oracle.forward(q, k, v, mask=Mask(), scale=0.0, gqa_ratio=2)
    with pytest.raises(SpecError, match="sliding window"):
        oracle.forward(q, k, v, mask=Mask("sliding_window"), scale=0.4, gqa_ratio=2)
    with pytest.raises(SpecError, match="dtype"):
        oracle.lowp_backward(q, k, v, do, do, np.zeros((2, 4, 5)), dtype="f8", mask=Mask(), scale=0.4, gqa_ratio=2)


# --- problems --------------------------------------------------------------------------------------

def small_spec(**fields):
    return AttentionBwdSpec(**{"dtype": "f16", "hdim_q": 16, "hdim_v": 8, "gqa_ratio": 2, **fields})


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_problem_storage_holds_the_values(dtype):
    problem = make_problem(small_spec(dtype=dtype), ProblemSize(2, 4, 6, 5))
    storage = {"f16": np.float16, "bf16": np.uint16, "f32": np.float32}[dtype]
    for name in ("q", "k", "v", "o", "do"):
        assert problem.tensors[name].dtype == storage
        np.testing.assert_array_equal(from_storage(problem.tensors[name], dtype), problem.values[name])
    assert problem.tensors["q"].shape == (2, 4, 6, 16) and problem.tensors["k"].shape == (2, 2, 5, 16)
    assert problem.tensors["v"].shape == (2, 2, 5, 8) and problem.tensors["do"].shape == (2, 4, 6, 8)
    assert problem.tensors["lse"].dtype == np.float32 and problem.tensors["lse"].shape == (2, 4, 6)


def test_problem_o_and_lse_come_from_the_forward():
    spec = small_spec(mask=Mask("causal_bottom_right"))
    problem = make_problem(spec, ProblemSize(1, 2, 6, 4))
    values = problem.values
    fwd = oracle.forward(values["q"], values["k"], values["v"], mask=spec.mask, scale=spec.scale, gqa_ratio=2)
    np.testing.assert_array_equal(values["o"], round_to(fwd.o, "f16"))
    np.testing.assert_array_equal(problem.tensors["lse"], fwd.lse.astype(np.float32))
    assert np.all(problem.tensors["lse"][:, :, :2] == np.inf)   # rows 0 and 1 see no key


def test_bshd_layout_is_a_strided_view_of_the_same_values():
    spec, size = small_spec(), ProblemSize(2, 4, 6, 5)
    bhsd, bshd = make_problem(spec, size, seed=7), make_problem(spec, size, seed=7, layout="bshd")
    for name in ("q", "k", "v", "o", "do"):
        np.testing.assert_array_equal(bshd.tensors[name], bhsd.tensors[name])
        assert bhsd.tensors[name].flags.c_contiguous
        assert bshd.tensors[name].transpose(0, 2, 1, 3).flags.c_contiguous
        assert bshd.tensors[name].strides != bhsd.tensors[name].strides
    assert bshd.tensors["lse"].flags.c_contiguous


def test_problems_are_reproducible_by_seed():
    spec, size = small_spec(), ProblemSize(1, 2, 4, 4)
    a, b, c = make_problem(spec, size, seed=1), make_problem(spec, size, seed=1), make_problem(spec, size, seed=2)
    np.testing.assert_array_equal(a.tensors["q"], b.tensors["q"])
    assert not np.array_equal(a.tensors["q"], c.tensors["q"])


def test_problem_gradients_are_cached_and_consistent():
    problem = make_problem(small_spec(), ProblemSize(1, 2, 4, 4))
    assert problem.oracle_gradients() is problem.oracle_gradients()
    assert problem.lowp_gradients(SCALAR_ROWS) is problem.lowp_gradients(SCALAR_ROWS)
    assert problem.lowp_gradients(SCALAR_ROWS) is not problem.lowp_gradients(MATRIX_K16)
    assert all(check.passed for check in problem.check(problem.lowp_gradients(SCALAR_ROWS).named(), SCALAR_ROWS))


@pytest.mark.parametrize("fields,broadcast,extra,shape,dtype", [
    ({"bias": "elementwise"}, "batch", "bias", (1, 4, 6, 5), np.float16),
    ({"bias": "elementwise"}, "heads", "bias", (2, 1, 6, 5), np.float16),
    ({"bias": "elementwise"}, "batch_heads", "bias", (1, 1, 6, 5), np.float16),
    ({"bias": "alibi", "alibi_slopes": True}, "batch", "alibi_slopes", (1, 4), np.float32),
    ({"bias": "alibi", "alibi_slopes": True}, "none", "alibi_slopes", (2, 4), np.float32),
])
def test_problem_with_bias(fields, broadcast, extra, shape, dtype):
    """The bias tensor the kernel reads, in the shape `broadcast` gives; its gradient in that shape."""
    problem = make_problem(small_spec(dbias=True, **fields), ProblemSize(2, 4, 6, 5), broadcast=broadcast)
    assert problem.tensors[extra].dtype == dtype and problem.tensors[extra].shape == shape
    assert set(problem.tensors) == {"q", "k", "v", "o", "do", "lse", extra}
    assert problem.oracle_gradients().named()["d" + extra].shape == shape
    assert problem.bias_gradients == ("d" + extra,)


def test_standard_alibi_reads_no_tensor():
    problem = make_problem(small_spec(bias="alibi"), ProblemSize(2, 4, 6, 5))
    assert set(problem.tensors) == {"q", "k", "v", "o", "do", "lse"} and problem.values["bias"].shape == (4, 6, 5)


@pytest.mark.parametrize("size,layout,match", [
    (ProblemSize(1, 3, 4, 4), "bhsd", "not a multiple of gqa_ratio"),
    (ProblemSize(1, 4, 0, 4), "bhsd", "seqlen_q"),
    (ProblemSize(1, 4, 4, 4), "sbhd", "layout"),
])
def test_bad_problems_are_rejected(size, layout, match):
    with pytest.raises(SpecError, match=match):
        make_problem(small_spec(), size, layout=layout)


def test_unknown_bias_kind_is_rejected():
    with pytest.raises(SpecError, match="unknown bias kind"):
        make_problem(small_spec(bias="relative"), ProblemSize(1, 2, 4, 4))


@pytest.mark.parametrize("softcap", [1e-40, -1.0, math.inf, math.nan, 4e38, True])
def test_the_oracle_refuses_a_softcap_by_the_specs_rule(softcap):
    q = np.ones((1, 1, 2, 4))
    with pytest.raises(SpecError) as refused:
        oracle.forward(q, q, q, mask=Mask(), scale=0.5, gqa_ratio=1, softcap=softcap)
    spec_reasons = AttentionBwdSpec(hdim_q=4, softcap=softcap).reasons()
    assert [str(r) for r in refused.value.reasons] == [str(r) for r in spec_reasons]
