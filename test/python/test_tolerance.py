"""The numerical gate (fmha_mlir.tolerance): tight enough that a 1% error in any gradient of any dtype
fails, loose enough that the same-dtype reference (what a correct kernel computes) passes."""
import numpy as np
import pytest

from fmha_mlir import oracle
from fmha_mlir.dtypes import round_to, to_storage
from fmha_mlir.errors import SpecError
from fmha_mlir.extreme_inputs import scaled_problem
from fmha_mlir.numerics import MATRIX_K16, SCALAR_ROWS, Numerics
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.tolerance import FACTOR, TINY, U32, check_gradients, ck_tolerance

NUMERICS = (SCALAR_ROWS, MATRIX_K16)


def problem_for(dtype="f16", hdim=16, mask=Mask(), size=ProblemSize(1, 2, 12, 10), **fields):
    return make_problem(AttentionBwdSpec(dtype=dtype, hdim_q=hdim, mask=mask, **fields), size, seed=3)


def as_kernel_output(grads: dict, dtype: str) -> dict:
    """Values as a kernel stores them: rounded to the dtype."""
    return {name: to_storage(g, dtype) for name, g in grads.items()}


def perturbed(grads: oracle.Gradients, name: str, delta: float) -> dict:
    """The oracle's gradients with one element of `name` moved by delta."""
    out = {n: g.copy() for n, g in grads.named().items()}
    out[name][(0,) * out[name].ndim] += delta
    return out


@pytest.mark.parametrize("dtype,hdim,expected", [
    ("f16", 64, (1.6e-2, 1.6e-2)), ("bf16", 128, (2.0e-2, 2.0e-2)), ("bf16", 129, (3.2e-2, 3.2e-2)),
    ("f32", 128, (1e-5, 1e-5)),
])
def test_ck_table_is_the_second_column(dtype, hdim, expected):
    assert ck_tolerance(dtype, hdim) == expected
    problem = problem_for(dtype, hdim=hdim)
    for check in problem.check(problem.oracle_gradients().named(), SCALAR_ROWS):
        assert check.ck_allowed == pytest.approx(expected[1] + expected[0] * check.scale)


def test_ck_table_rejects_unknown_inputs():
    with pytest.raises(SpecError, match="dtype"):
        ck_tolerance("f8", 64)
    with pytest.raises(SpecError, match="hdim"):
        ck_tolerance("f16", 0)


@pytest.mark.parametrize("numerics", NUMERICS, ids=["scalar_rows", "matrix_k16"])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_the_allowed_error_is_factor_times_the_model_error_plus_tiny(dtype, numerics):
    problem = problem_for(dtype, mask=Mask("causal_bottom_right"))
    exact, lowp = problem.oracle_gradients(), problem.lowp_gradients(numerics)
    checks = problem.check(as_kernel_output(lowp.named(), dtype), numerics)
    assert [c.name for c in checks] == ["dq", "dk", "dv"]
    for check in checks:
        reference, low = exact.named()[check.name], lowp.named()[check.name]
        lowp_err = np.max(np.abs(low - reference))
        magnitudes = exact.term_magnitudes.get(check.name)
        assert check.sum_err == (0.0 if magnitudes is None else U32 * np.max(magnitudes))
        assert (magnitudes is None) == (check.name == "dv")   # dV = P^T dO takes no dS
        model = max(lowp_err, check.sum_err)
        assert check.allowed == pytest.approx(FACTOR * model + TINY * np.max(np.abs(reference)))
        assert check.passed and check.max_abs_err == pytest.approx(lowp_err) and check.ratio <= 0.5 + 1e-9
        assert check.lowp_err > 0


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_bound_is_a_few_times_the_reference_error_not_a_floor(dtype):
    """For f16 / bf16 the bound is FACTOR x the reference's own error (the tiny term is noise), and
    the reference's error is the dtype's rounding: 0.05 % (f16) / 0.4 % (bf16) of the largest value,
    where CK's table allows 1.6 % / 2 % plus as much again."""
    problem = problem_for(dtype, hdim=64, size=ProblemSize(1, 4, 77, 300))
    for check in problem.check(problem.oracle_gradients().named(), MATRIX_K16):
        assert check.allowed <= 1.01 * FACTOR * check.lowp_err
        assert check.allowed < 0.01 * check.scale < check.ck_allowed


@pytest.mark.parametrize("numerics", NUMERICS, ids=["scalar_rows", "matrix_k16"])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("name", ["dq", "dk", "dv"])
@pytest.mark.parametrize("size", [ProblemSize(1, 2, 5, 9), ProblemSize(1, 4, 77, 300)], ids=["tiny", "odd"])
def test_a_one_percent_error_in_any_gradient_fails(name, dtype, numerics, size):
    """The gate's reason to exist: a kernel whose `name` is 1% off (scaled, then rounded to the dtype
    as a kernel would store it) fails, while the same-dtype reference passes."""
    problem = problem_for(dtype, hdim=64, mask=Mask("causal_bottom_right"), size=size)
    lowp = problem.lowp_gradients(numerics).named()
    assert all(c.passed for c in problem.check(as_kernel_output(lowp, dtype), numerics))
    wrong = {**lowp, name: lowp[name] * 0.99}
    checks = {c.name: c for c in problem.check(as_kernel_output(wrong, dtype), numerics)}
    assert not checks[name].passed, str(checks[name])
    assert all(c.passed for n, c in checks.items() if n != name)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("name", ["dq", "dk", "dv"])
def test_a_perturbation_passes_within_the_bound_and_fails_beyond(dtype, name):
    problem = problem_for(dtype)
    exact = problem.oracle_gradients()
    allowed = {c.name: c.allowed for c in problem.check(exact.named(), SCALAR_ROWS)}[name]
    within = problem.check(perturbed(exact, name, 0.9 * allowed), SCALAR_ROWS)
    beyond = problem.check(perturbed(exact, name, -1.1 * allowed), SCALAR_ROWS)
    assert all(c.passed for c in within)
    assert {c.name: c.passed for c in beyond} == {"dq": name != "dq", "dk": name != "dk", "dv": name != "dv"}


def test_no_floor_where_the_reference_is_exact():
    """Where the gradient is zero (each row sees one key: P = 1, dS = P (dP - D) = 0) the bound is the
    f32 rounding of the model, not a percentage: 1e-5 of error fails."""
    problem = problem_for("f16", mask=Mask("causal_top_left"), size=ProblemSize(1, 2, 1, 4))
    exact = problem.oracle_gradients()
    assert np.all(exact.dq == 0)
    checks = {c.name: c for c in problem.check({**exact.named(), "dq": exact.dq + 1e-5}, SCALAR_ROWS)}
    assert checks["dq"].allowed < 1e-6 and not checks["dq"].passed


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_always_fails(bad):
    problem = problem_for()
    exact = problem.oracle_gradients()
    kernel = as_kernel_output(exact.named(), "f16")
    kernel["dk"][0, 0, 3, 1] = bad
    checks = {c.name: c for c in problem.check(kernel, SCALAR_ROWS)}
    assert not checks["dk"].passed and checks["dk"].max_abs_err == np.inf
    assert checks["dq"].passed and checks["dv"].passed


def test_the_model_follows_the_body():
    """Rounding P and dS (matrix bodies) costs bf16 accuracy the scalar body does not lose; in f32 the
    key-by-key sequential sums of the scalar body are what the reference must model, not NumPy's
    pairwise ones (the error grows with the number of terms)."""
    problem = problem_for("bf16", hdim=64, size=ProblemSize(1, 4, 64, 256))
    exact = problem.oracle_gradients().named()
    rounded = problem.lowp_gradients(Numerics(round_p_ds=True, sum_chunk=16)).named()
    kept = problem.lowp_gradients(Numerics(round_p_ds=False, sum_chunk=16)).named()
    err = {name: (np.max(np.abs(rounded[name] - exact[name])), np.max(np.abs(kept[name] - exact[name])))
           for name in exact}
    assert any(with_rounding > without for with_rounding, without in err.values())
    f32 = problem_for("f32", hdim=64, size=ProblemSize(1, 2, 16, 2048))
    exact32 = f32.oracle_gradients().dq
    # RMS over dQ's 2048 elements, not the max: one element's error is one draw, and the max's ratio
    # moved below 2 with the BLAS numpy runs on (1.50 on a 2-core CI-like machine); the RMS ratio is
    # 1.6 there, the sum order's share of an error that dS's own f32 rounding also feeds.
    sequential = np.sqrt(np.mean((f32.lowp_gradients(SCALAR_ROWS).dq - exact32) ** 2))
    chunked = np.sqrt(np.mean((f32.lowp_gradients(Numerics(True, 2048)).dq - exact32) ** 2))
    assert sequential > 1.3 * chunked


def test_bf16_bits_are_read_as_values():
    problem = problem_for("bf16")
    kernel = as_kernel_output(problem.lowp_gradients(SCALAR_ROWS).named(), "bf16")
    assert kernel["dq"].dtype == np.uint16
    assert all(c.passed for c in problem.check(kernel, SCALAR_ROWS))


def test_a_mask_bug_fails():
    """A kernel that lets each row see one key too many fails."""
    spec_mask, buggy = Mask("sliding_window", 4, 0), Mask("sliding_window", 4, 1)
    problem = problem_for("f16", mask=spec_mask)
    values = [problem.values[n] for n in ("q", "k", "v", "o", "do", "lse")]
    wrong = oracle.backward(*values, mask=buggy, scale=problem.spec.scale, gqa_ratio=1)
    assert not any(c.passed for c in problem.check(as_kernel_output(wrong.named(), "f16"), SCALAR_ROWS))


def test_dbias_is_checked_when_given():
    problem = problem_for("f16", bias="elementwise", dbias=True)
    exact = problem.oracle_gradients()
    checks = problem.check(perturbed(exact, "dbias", 1.0), SCALAR_ROWS)
    assert [c.name for c in checks] == ["dq", "dk", "dv", "dbias"]
    assert [c.passed for c in checks] == [True, True, True, False]


def test_slope_gradient_is_checked_when_given():
    problem = problem_for("f16", bias="alibi", alibi_slopes=True, dbias=True)
    exact = problem.oracle_gradients()
    kernel = as_kernel_output({n: g for n, g in exact.named().items() if n != "dalibi_slopes"}, "f16")
    kernel["dalibi_slopes"] = exact.dalibi_slopes * 1.01
    checks = problem.check(kernel, SCALAR_ROWS)
    assert [(c.name, c.passed) for c in checks] == [("dq", True), ("dk", True), ("dv", True), ("dalibi_slopes", False)]


def test_malformed_kernel_outputs_are_rejected():
    problem = problem_for()
    exact, lowp = problem.oracle_gradients(), problem.lowp_gradients(SCALAR_ROWS)
    good = exact.named()
    cases = [
        ({"dq": good["dq"], "dk": good["dk"]}, "dv: missing"),
        ({**good, "dx": good["dq"]}, "dx: no such gradient"),
        ({**good, "dq": good["dq"][..., :-1]}, "dq: has shape"),
        ({**good, "dbias": good["dq"]}, "dbias: the kernel gave dbias"),
        ({**good, "dv": good["dv"].astype(np.int32)}, "dv: kernel output has element type int32"),
    ]
    for kernel, match in cases:
        with pytest.raises(SpecError, match=match):
            check_gradients(kernel, exact, lowp, "f16", 16)


def test_numerics_reject_a_bad_chunk():
    with pytest.raises(SpecError, match="sum_chunk"):
        Numerics(True, 0)
    assert np.all(round_to(np.array([1.0]), "f16") == 1.0)


def test_slope_gradient_bound_follows_the_sums_conditioning():
    """d(slopes) is one sum of cancelling terms: its model error is the larger of the lowp draw and
    U32 * sum |dS distance| (computed here from P, dP and D independently of the oracle's backward);
    at 20-40-fold cancellation a 0.1% error and the loss of one query row's terms still fail."""
    problem = problem_for("bf16", size=ProblemSize(1, 2, 6, 300), bias="alibi", alibi_slopes=True, dbias=True)
    v, spec = problem.values, problem.spec
    exact, lowp = problem.oracle_gradients(), problem.lowp_gradients(MATRIX_K16)
    p = oracle.forward(v["q"], v["k"], v["v"], mask=spec.mask, scale=spec.scale, gqa_ratio=1,
                       alibi_slopes=v["alibi_slopes"]).p
    ds = p * (v["do"] @ np.swapaxes(v["v"], -1, -2) - np.sum(v["do"] * v["o"], axis=-1)[..., None])
    distance = oracle.alibi_distance(6, 300)
    magnitude = np.abs(ds * distance).sum(axis=(-1, -2)).reshape(v["alibi_slopes"].shape)
    np.testing.assert_allclose(exact.term_magnitudes["dalibi_slopes"], magnitude, rtol=1e-6)   # P from the f32 lse
    assert np.all(magnitude > 20 * np.abs(exact.dalibi_slopes))   # the cancellation is real

    def slope_check(dslopes):
        kernel = as_kernel_output({n: g for n, g in exact.named().items() if n != "dalibi_slopes"}, "bf16")
        kernel["dalibi_slopes"] = dslopes
        return problem.check(kernel, MATRIX_K16)[-1]

    check = slope_check(exact.dalibi_slopes)
    assert check.sum_err == U32 * np.max(exact.term_magnitudes["dalibi_slopes"])
    lowp_err = np.max(np.abs(lowp.dalibi_slopes - exact.dalibi_slopes))
    assert check.allowed == FACTOR * max(lowp_err, check.sum_err) + TINY * np.max(np.abs(exact.dalibi_slopes))
    assert not slope_check(exact.dalibi_slopes * 1.001).passed
    one_row = (ds * -distance)[:, :, 0].sum(axis=-1).reshape(v["alibi_slopes"].shape)
    assert not slope_check(exact.dalibi_slopes - one_row).passed


def other_order_gradients(problem) -> dict:
    """dQ, dK as a correct f32 kernel may compute them: dP = dO . V summed over the head dim forwards,
    D = dO . O backwards, one term at a time; the rest as the oracle, in f32, stored in the dtype."""
    f32 = np.float32
    q, k, v, o, do, lse = (problem.values[n].astype(f32) for n in ("q", "k", "v", "o", "do", "lse"))
    dp, d, last = np.zeros(do.shape[:-1] + k.shape[2:3], f32), np.zeros(do.shape[:-1], f32), do.shape[-1] - 1
    for c in range(do.shape[-1]):
        dp += do[..., c, None] * v[:, :, None, :, c]
        d += do[..., last - c] * o[..., last - c]
    scale = f32(problem.spec.scale)
    ds = np.exp((q @ np.swapaxes(k, -1, -2)) * scale - lse[..., None]) * (dp - d[..., None])
    return {"dq": round_to(ds @ k * scale, problem.spec.dtype),
            "dk": round_to(np.swapaxes(ds, -1, -2) @ q * scale, problem.spec.dtype)}


def test_one_key_gradients_are_rounding_noise_within_the_model():
    """One key: P = 1, O = V, so dS = P (dP - D) is the f32 rounding of two equal inner products and dQ,
    dK are noise about 0. A correct kernel that sums dP and D in other orders than the lowp reference
    draws other noise: beyond FACTOR x the lowp draw on some problems, within the model of dS's
    rounding on all. A D 1% off (dS = -0.01 D) is no noise: it fails by orders of magnitude."""
    spec = AttentionBwdSpec("f16", 32, mask=Mask("none"))
    beyond_lowp = 0
    for seed in range(20):
        problem = scaled_problem(spec, ProblemSize(1, 2, 13, 1), seed=seed, magnitude=3.0)
        exact = problem.oracle_gradients()
        kernel = {**as_kernel_output(exact.named(), "f16"), **other_order_gradients(problem)}
        checks = {c.name: c for c in problem.check(kernel, MATRIX_K16)}
        assert all(c.passed for c in checks.values()), [str(c) for c in checks.values()]
        beyond_lowp += any(c.max_abs_err > FACTOR * c.lowp_err + TINY * c.scale for c in (checks["dq"], checks["dk"]))
        values = [problem.values[n] for n in ("q", "k", "v", "o", "do", "lse")]
        values[3] = values[3] * 1.01
        wrong_d = oracle.backward(*values, mask=spec.mask, scale=spec.scale, gqa_ratio=1)
        checks = {c.name: c for c in problem.check(as_kernel_output(wrong_d.named(), "f16"), MATRIX_K16)}
        assert min(checks["dq"].ratio, checks["dk"].ratio) > 100, [str(c) for c in checks.values()]
    assert beyond_lowp >= 5   # the noise is real: the lowp draw alone does not bound it


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("size", [ProblemSize(1, 2, 12, 10), ProblemSize(1, 4, 77, 300)], ids=["small", "odd"])
def test_the_rounding_model_stays_far_below_a_bug(dtype, size):
    """Where dS does not cancel, U32 x dS's carried rounding is ~1e-6 of the gradient, below the lowp
    draw in f16 / bf16. In f32 it can set the bound (the small problem's lowp draw is a few ulps), and
    a missing key's term in dQ and a missing query row's in dK still fail."""
    problem = problem_for(dtype, mask=Mask("causal_bottom_right"), size=size, bias="elementwise", dbias=True)
    exact = problem.oracle_gradients()
    checks = {c.name: c for c in problem.check(as_kernel_output(exact.named(), dtype), MATRIX_K16)}
    for name in ("dq", "dk", "dbias"):
        assert 0 < checks[name].sum_err < 1e-5 * checks[name].scale
        if dtype != "f32":
            assert checks[name].sum_err < checks[name].lowp_err
    if dtype == "f32" and size.seqlen_k == 10:
        assert checks["dq"].sum_err > checks["dq"].lowp_err and checks["dk"].sum_err > checks["dk"].lowp_err
    v, spec = problem.values, problem.spec
    p = oracle.forward(v["q"], v["k"], v["v"], mask=spec.mask, scale=spec.scale, gqa_ratio=1, bias=v["bias"]).p
    ds = p * (v["do"] @ np.swapaxes(v["v"], -1, -2) - np.sum(v["do"] * v["o"], axis=-1)[..., None])
    # key 0 (every row that sees a key sees it) and the last query row (it sees every key)
    missing = {"dq": exact.dq - spec.scale * ds[..., :1] @ v["k"][:, :, :1],
               "dk": exact.dk - spec.scale * np.swapaxes(ds[:, :, -1:], -1, -2) @ v["q"][:, :, -1:]}
    for name, wrong in missing.items():
        check = {c.name: c for c in problem.check({**exact.named(), name: wrong}, MATRIX_K16)}[name]
        assert not check.passed, str(check)
