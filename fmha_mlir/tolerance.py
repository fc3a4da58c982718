"""The one numerical gate for kernel gradients (numpy only: importable without MLIR).

FlashAttention's rule, with no floor that could hide a real error. A kernel gradient G passes when

    max|G - oracle| <= FACTOR * max|lowp - oracle| + tiny,     tiny = TINY * max|oracle|

oracle: the float64 backward (`oracle.backward`) from the same rounded inputs the kernel read.
lowp:   the same backward as the kernel's body computes it (`oracle.lowp_backward` with the body's
        `fmha_mlir.numerics.Numerics`): f32 arithmetic, the long reductions summed in the kernel's
        order, P and dS rounded to the dtype where the body rounds them, outputs rounded to the dtype.
        Its distance to the oracle is the error a correct kernel of this body has on *this* problem;
        FACTOR leaves room for what the model does not follow (the order of atomics, the exp2
        approximation, a matrix unit's internal accumulation). It computes exact math where a body
        approximates (exp, tanh as np.tanh, division): a body's approximation is not modelled, it
        has to pass within FACTOR.
tiny:   only keeps the bound above zero where the reference happens to be exact (a tiny f32 problem):
        about 8 f32 ulps of the largest gradient, far below any error a bug makes. There is no floor:
        where the reference is exact to f32 rounding, so is the bound.

Every maximum is over the whole gradient tensor. A NaN or inf anywhere in a kernel output fails.

Where a gradient's error is f32 rounding noise, which a second computation draws again rather than
repeats, the lowp draw does not bound it. The oracle models that noise (`Gradients.term_magnitudes`, per
element of the gradient), and the error allowed follows the larger of the draw and the model:

    max|G - oracle| <= FACTOR * max(max|lowp - oracle|, U32 * max term_magnitudes) + tiny

Every f32 computation of a sum has an error of the order of u * sum |term| (u = 2^-24: the summation's
condition number times the terms' rounding); where the sum cancels, that is all of the result, and the
draw a single reference makes of it varies by factors of 2-5 with the order of its inner products, even
with the BLAS numpy runs on.

d(slopes)[h] = sum over q, k of dS * -|distance| is one such sum (sum_k dS = 0 in every row, so the
result is ~1000x smaller than sum |term| at distances near 1000); the same lowp reference is 3.9e-3 from
the oracle on the H200 machine and 1.1e-2 here, on one problem. Its term_magnitudes are sum |dS distance|.
A 1% error in d(slopes) is ~100x U32 sum |term| at 1000-fold cancellation; a missing key's term is one of
sum |term|'s ~10^5 parts, a missing row ~1/Sq of it. Measured on the H200's 112 tiled d(slopes) runs:
kernel error <= 0.92 u sum |term|, the lowp draw 0.16-1.38 of it (reports/bench_notes.md).

dS = P (dP - D) is the other: dP = dO . V and D = rowsum(dO * O) are f32 inner products over the head
dim (the products of two dtype values are exact in f32, only the sums round), each off by ~u x its
sum of |term|, so dS_ij is off by ~u x r_ij,

    r_ij = P_ij * (sum_d |dO_id V_jd| + sum_d |dO_id O_id|)     (times 1 - tanh^2 under softcap),

which is all of dS where dP - D cancels: with one visible key P = 1, O = V and dS is pure noise. The
products carry it as they carry dS: term_magnitudes are scale * sum_j r_ij |K_jc| for dQ, scale *
sum_i r_ij |Q_ic| (over the GQA group) for dK, and r itself (summed as the bias broadcasts) for dbias.
dS's rounding to the dtype before the products is relative to dS, so second order here (the one-key
lowp draw is the same with and without it); the lowp draw models it where dS does not cancel. On one-key
problems (f16 / bf16 / f32, head dims 32-128, 40 problems each) the lowp draw is <= 0.86 of U32 x the
carried r for dQ and <= 0.22 for dK (its sum over query rows adds noise of random sign); a reference
that sums dP forwards and D backwards errs <= 1.08 of it, and the kernels of every target and body in
the interpreter (f16 / bf16, 288 one-key gradients) <= 0.52, where the lowp-only bound put them at up
to 2.4x and 2x their allowance. Where dS does not cancel, |dP - D| is of the order sqrt(d) |dO| |V|
against r's d |dO| |V|, and U32 * term_magnitudes is <= 2e-6 of the gradient's largest value (12-512
rows, 10-2048 keys, head dims 16-128): below the lowp draw in f16 / bf16; in f32 it can exceed the draw
a few times on small problems (where that draw is a few ulps), and stays ~5000x below a 1% error, a
missing key or a wrong D.

dsinks_h = -sum over rows and batches of exp(s_h - lse_i) D_i (D_i - dlse_i with an lse gradient) is
a third f32 sum, whose terms carry their own rounding: D's inner product (u x sum_d |dO O|, plus |dlse|
for the subtraction), and exp's relative error on |D|: the exponent s_h - lse and its log2 e factor
each rounded (2 |s_h - lse| u), the hardware exp2's 2 ulps (4 u) and the product (u). Its
term_magnitudes are sum_i exp(s_h - lse_i) (sum_d |dO O| + |dlse| + (5 + 2 |s_h - lse_i|) |D_i|); the
same dlse term joins dS's r_ij above (D - dlse rounds once more). A missing row's term is one of the
sum's ~B Sq parts, a sign error all of it.

CK's backward tests (rtol = atol per dtype, seed document 002) are reported beside the gate as a second
column (`GradCheck.ck_allowed`), for comparison with that suite; they allow 10-100x more and decide nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dtypes import STORAGE, from_storage
from .errors import Reason, SpecError
from .oracle import Gradients, is_positive_int

# FlashAttention's test suite allows the kernel twice the error of a same-precision PyTorch reference.
FACTOR = 2.0
# 2^-20 of the largest gradient: 8 ulps of f32, 1/1000 of a bf16 ulp.
TINY = 2.0 ** -20
# f32's unit roundoff: the rounding error scale of each term of a long sum (the conditioned gradients).
U32 = 2.0 ** -24

# CK's table (seed document 002): rtol = atol; bf16 above hdim 128 gets more room.
CK_BF16_WIDE_HDIM = 128
_CK = {"f16": 1.6e-2, "bf16": 2.0e-2, "bf16_wide": 3.2e-2, "f32": 1e-5}

GRADIENT_NAMES = ("dq", "dk", "dv", "dbias", "dalibi_slopes", "dsinks")
OPTIONAL_GRADIENTS = {"dbias": "bias", "dalibi_slopes": "slopes tensor", "dsinks": "sinks"}
REQUIRED_GRADIENTS = ("dq", "dk", "dv")


def ck_tolerance(dtype: str, hdim: int) -> tuple[float, float]:
    """(rtol, atol) of CK's backward tests for `dtype`; hdim is the larger of hdim_q and hdim_v."""
    if dtype not in STORAGE:
        raise SpecError([Reason("dtype", f"unknown element type {dtype!r}", f"use one of {', '.join(STORAGE)}")])
    if not is_positive_int(hdim):
        raise SpecError([Reason("hdim", f"must be a positive integer (got {hdim!r})")])
    key = "bf16_wide" if dtype == "bf16" and hdim > CK_BF16_WIDE_HDIM else dtype
    return _CK[key], _CK[key]


@dataclass(frozen=True)
class GradCheck:
    name: str
    max_abs_err: float   # max|kernel - oracle|; inf when the kernel output holds NaN or inf
    allowed: float       # FACTOR * lowp_err + tiny
    passed: bool
    lowp_err: float      # max|lowp - oracle|
    scale: float         # max|oracle|
    ck_allowed: float    # CK's atol + rtol * max|oracle|: the second column, not the gate
    sum_err: float = 0.0  # U32 * max term_magnitudes (the rounding models: dq, dk, dbias, d(slopes)), else 0

    @property
    def ratio(self) -> float:
        """max|err| / allowed: the share of the bound the kernel uses (> 1 fails)."""
        return self.max_abs_err / self.allowed if self.allowed > 0 else (0.0 if self.max_abs_err == 0 else np.inf)

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        model = (f"lowp {self.lowp_err:.3e}" if self.sum_err <= self.lowp_err
                 else f"u sum|term| {self.sum_err:.3e} (lowp {self.lowp_err:.3e})")
        return (f"{self.name}: max|err| {self.max_abs_err:.3e} vs allowed {self.allowed:.3e} "
                f"({FACTOR:g} x {model} + tiny), {self.ratio:.2f} of it: {verdict}"
                f" [CK table: {self.ck_allowed:.3e}]")


def _kernel_values(name: str, array, dtype: str) -> np.ndarray:
    """A kernel output as float64 values: bf16 arrives as uint16 bits, other floats as values."""
    a = np.asarray(array)
    if dtype == "bf16" and a.dtype == np.uint16:
        return from_storage(a, dtype).astype(np.float64)
    if a.dtype.kind == "f":
        return a.astype(np.float64)
    raise SpecError([Reason(name, f"kernel output has element type {a.dtype}",
                            f"pass {dtype} storage ({STORAGE[dtype]}) or float values")])


def _max_abs(x: np.ndarray) -> float:
    return float(np.max(np.abs(x))) if x.size else 0.0


def judge(name: str, got: np.ndarray, reference: np.ndarray, lowp: np.ndarray, dtype: str,
          hdim: int, term_magnitudes: np.ndarray | None = None) -> GradCheck:
    """The gate for one gradient: float64 values of the kernel, the oracle and the lowp reference;
    `term_magnitudes` (per element, what its f32 rounding noise scales with) where the oracle models it."""
    rtol, atol = ck_tolerance(dtype, hdim)
    scale = _max_abs(reference)
    lowp_err = _max_abs(lowp - reference)
    sum_err = 0.0 if term_magnitudes is None else U32 * _max_abs(term_magnitudes)
    allowed = FACTOR * max(lowp_err, sum_err) + TINY * scale
    err = _max_abs(got - reference) if np.all(np.isfinite(got)) else float("inf")
    return GradCheck(name, err, allowed, err <= allowed, lowp_err, scale, atol + rtol * scale, sum_err)


def check_gradients(kernel: dict, oracle: Gradients, lowp: Gradients, dtype: str, hdim: int) -> list[GradCheck]:
    """Judge each gradient in `kernel` ({"dq", "dk", "dv"} required, "dbias" / "dalibi_slopes" / "dsinks"
    optional; storage arrays or float values in logical shape) against the gate above. `lowp` must model the
    kernel's body (`oracle.lowp_backward(..., numerics=...)`). hdim = max(hdim_q, hdim_v), for the CK column."""
    references, lowp_values = oracle.named(), lowp.named()
    reasons = [Reason(name, "no such gradient", f"use {', '.join(GRADIENT_NAMES)}")
               for name in kernel if name not in GRADIENT_NAMES]
    reasons += [Reason(name, "missing from the kernel outputs") for name in REQUIRED_GRADIENTS if name not in kernel]
    reasons += [Reason(name, f"the kernel gave {name} but the problem has no {OPTIONAL_GRADIENTS[name]}")
                for name in kernel if name in OPTIONAL_GRADIENTS and name not in references]
    reasons += [Reason(name, f"has shape {np.shape(kernel[name])}, the oracle's is {references[name].shape}")
                for name in GRADIENT_NAMES if name in kernel and name in references
                and np.shape(kernel[name]) != references[name].shape]
    if reasons:
        raise SpecError(reasons)
    return [judge(name, _kernel_values(name, kernel[name], dtype), references[name], lowp_values[name], dtype, hdim,
                  oracle.term_magnitudes.get(name))
            for name in GRADIENT_NAMES if name in kernel]
