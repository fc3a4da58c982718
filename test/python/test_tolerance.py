"""The gradient tolerance policy (fmha_mlir.tolerance)."""
import numpy as np
import pytest

from fmha_mlir import oracle
from fmha_mlir.dtypes import to_storage
from fmha_mlir.errors import SpecError
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.tolerance import FACTOR, check_gradients, floor_tolerance


def problem_for(dtype="f16", hdim=16, mask=Mask(), **fields):
    return make_problem(AttentionBwdSpec(dtype=dtype, hdim_q=hdim, mask=mask, **fields), ProblemSize(1, 2, 12, 10))


def as_kernel_output(grads: oracle.Gradients, dtype: str) -> dict:
    return {name: to_storage(g, dtype) for name, g in grads.named().items()}


def perturbed(grads: oracle.Gradients, name: str, delta: float) -> dict:
    """The oracle's gradients with one element of `name` moved by delta."""
    out = {n: g.copy() for n, g in grads.named().items()}
    out[name][(0,) * out[name].ndim] += delta
    return out


@pytest.mark.parametrize("dtype,hdim,expected", [
    ("f16", 64, (1.6e-2, 1.6e-2)), ("f16", 256, (1.6e-2, 1.6e-2)),
    ("bf16", 128, (2.0e-2, 2.0e-2)), ("bf16", 129, (3.2e-2, 3.2e-2)), ("bf16", 256, (3.2e-2, 3.2e-2)),
    ("f32", 128, (1e-4, 1e-5)),
])
def test_floor_table(dtype, hdim, expected):
    assert floor_tolerance(dtype, hdim) == expected


def test_floor_table_rejects_unknown_inputs():
    with pytest.raises(SpecError, match="dtype"):
        floor_tolerance("f8", 64)
    with pytest.raises(SpecError, match="hdim"):
        floor_tolerance("f16", 0)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_the_allowed_error_is_factor_times_lowp_error_plus_floor(dtype):
    problem = problem_for(dtype, mask=Mask("causal_bottom_right"))
    exact, lowp = problem.oracle_gradients(), problem.lowp_gradients()
    rtol, atol = floor_tolerance(dtype, 16)
    checks = check_gradients(as_kernel_output(lowp, dtype), exact, lowp, dtype, 16)
    assert [c.name for c in checks] == ["dq", "dk", "dv"]
    for check in checks:
        reference, low = exact.named()[check.name], lowp.named()[check.name]
        lowp_err = np.max(np.abs(low - reference))
        assert check.allowed == pytest.approx(FACTOR * lowp_err + atol + rtol * np.max(np.abs(reference)))
        assert check.passed and check.max_abs_err == pytest.approx(lowp_err)
    if dtype != "f32":   # the low-precision reference really is low precision
        assert all(c.lowp_err > 0 for c in checks)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("name", ["dq", "dk", "dv"])
def test_a_perturbation_passes_within_the_bound_and_fails_beyond(dtype, name):
    problem = problem_for(dtype)
    exact, lowp = problem.oracle_gradients(), problem.lowp_gradients()
    allowed = {c.name: c.allowed for c in check_gradients(exact.named(), exact, lowp, dtype, 16)}[name]
    within = check_gradients(perturbed(exact, name, 0.9 * allowed), exact, lowp, dtype, 16)
    beyond = check_gradients(perturbed(exact, name, -1.1 * allowed), exact, lowp, dtype, 16)
    assert all(c.passed for c in within)
    assert {c.name: c.passed for c in beyond} == {"dq": name != "dq", "dk": name != "dk", "dv": name != "dv"}


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_always_fails(bad):
    problem = problem_for()
    exact, lowp = problem.oracle_gradients(), problem.lowp_gradients()
    kernel = as_kernel_output(exact, "f16")
    kernel["dk"][0, 0, 3, 1] = bad
    checks = {c.name: c for c in check_gradients(kernel, exact, lowp, "f16", 16)}
    assert not checks["dk"].passed and checks["dk"].max_abs_err == np.inf
    assert checks["dq"].passed and checks["dv"].passed


def test_bf16_above_hdim_128_gets_the_wider_floor():
    problem = problem_for("bf16")
    exact, lowp = problem.oracle_gradients(), problem.lowp_gradients()
    narrow = check_gradients(exact.named(), exact, lowp, "bf16", 128)[0]
    wide = check_gradients(exact.named(), exact, lowp, "bf16", 256)[0]
    assert wide.allowed > narrow.allowed
    kernel = perturbed(exact, "dq", (narrow.allowed + wide.allowed) / 2)
    assert check_gradients(kernel, exact, lowp, "bf16", 256)[0].passed
    assert not check_gradients(kernel, exact, lowp, "bf16", 128)[0].passed


def test_bf16_bits_are_read_as_values():
    problem = problem_for("bf16")
    kernel = as_kernel_output(problem.lowp_gradients(), "bf16")
    assert kernel["dq"].dtype == np.uint16
    assert all(c.passed for c in problem.check(kernel))


def test_a_mask_bug_fails():
    """The bound is not vacuous: a kernel that lets each row see one key too many fails."""
    spec_mask, buggy = Mask("sliding_window", 4, 0), Mask("sliding_window", 4, 1)
    problem = problem_for("f16", mask=spec_mask)
    values = [problem.values[n] for n in ("q", "k", "v", "o", "do", "lse")]
    wrong = oracle.backward(*values, mask=buggy, scale=problem.spec.scale, gqa_ratio=1)
    assert not any(c.passed for c in problem.check(wrong.named()))


def test_dbias_is_checked_when_given():
    problem = problem_for("f16", bias="elementwise", dbias=True)
    exact = problem.oracle_gradients()
    checks = problem.check(perturbed(exact, "dbias", 1.0))
    assert [c.name for c in checks] == ["dq", "dk", "dv", "dbias"]
    assert [c.passed for c in checks] == [True, True, True, False]


def test_malformed_kernel_outputs_are_rejected():
    problem = problem_for()
    exact, lowp = problem.oracle_gradients(), problem.lowp_gradients()
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
