"""The one numerical gate for kernel gradients (numpy only: importable without MLIR).

FlashAttention's rule, with no floor that could hide a real error. A kernel gradient G passes when

    max|G - oracle| <= FACTOR * max|lowp - oracle| + tiny,     tiny = TINY * max|oracle|

oracle: the float64 backward (`oracle.backward`) from the same rounded inputs the kernel read.
lowp:   the same backward as the kernel's body computes it (`oracle.lowp_backward` with the body's
        `fmha_mlir.numerics.Numerics`): f32 arithmetic, the long reductions summed in the kernel's
        order, P and dS rounded to the dtype where the body rounds them, outputs rounded to the dtype.
        Its distance to the oracle is the error a correct kernel of this body has on *this* problem;
        FACTOR leaves room for what the model does not follow (the order of atomics, the exp2
        approximation, a matrix unit's internal accumulation).
tiny:   only keeps the bound above zero where the reference happens to be exact (a tiny f32 problem):
        about 8 f32 ulps of the largest gradient, far below any error a bug makes. There is no floor:
        where the reference is exact to f32 rounding, so is the bound.

Every maximum is over the whole gradient tensor. A NaN or inf anywhere in a kernel output fails.

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

# CK's table (seed document 002): rtol = atol; bf16 above hdim 128 gets more room.
CK_BF16_WIDE_HDIM = 128
_CK = {"f16": 1.6e-2, "bf16": 2.0e-2, "bf16_wide": 3.2e-2, "f32": 1e-5}

GRADIENT_NAMES = ("dq", "dk", "dv", "dbias", "dalibi_slopes")
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

    @property
    def ratio(self) -> float:
        """max|err| / allowed: the share of the bound the kernel uses (> 1 fails)."""
        return self.max_abs_err / self.allowed if self.allowed > 0 else (0.0 if self.max_abs_err == 0 else np.inf)

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{self.name}: max|err| {self.max_abs_err:.3e} vs allowed {self.allowed:.3e} "
                f"({FACTOR:g} x lowp {self.lowp_err:.3e} + tiny), {self.ratio:.2f} of it: {verdict}"
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
          hdim: int) -> GradCheck:
    """The gate for one gradient: float64 values of the kernel, the oracle and the lowp reference."""
    rtol, atol = ck_tolerance(dtype, hdim)
    scale = _max_abs(reference)
    lowp_err = _max_abs(lowp - reference)
    allowed = FACTOR * lowp_err + TINY * scale
    err = _max_abs(got - reference) if np.all(np.isfinite(got)) else float("inf")
    return GradCheck(name, err, allowed, err <= allowed, lowp_err, scale, atol + rtol * scale)


def check_gradients(kernel: dict, oracle: Gradients, lowp: Gradients, dtype: str, hdim: int) -> list[GradCheck]:
    """Judge each gradient in `kernel` ({"dq", "dk", "dv"} required, "dbias" / "dalibi_slopes" optional; storage arrays or
    float values in logical shape) against the gate above. `lowp` must model the kernel's body
    (`oracle.lowp_backward(..., numerics=...)`). hdim = max(hdim_q, hdim_v), for the CK column."""
    references, lowp_values = oracle.named(), lowp.named()
    reasons = [Reason(name, "no such gradient", f"use {', '.join(GRADIENT_NAMES)}")
               for name in kernel if name not in GRADIENT_NAMES]
    reasons += [Reason(name, "missing from the kernel outputs") for name in REQUIRED_GRADIENTS if name not in kernel]
    reasons += [Reason(name, f"the kernel gave {name} but the problem has no such bias")
                for name in kernel if name in ("dbias", "dalibi_slopes") and name not in references]
    reasons += [Reason(name, f"has shape {np.shape(kernel[name])}, the oracle's is {references[name].shape}")
                for name in GRADIENT_NAMES if name in kernel and name in references
                and np.shape(kernel[name]) != references[name].shape]
    if reasons:
        raise SpecError(reasons)
    return [judge(name, _kernel_values(name, kernel[name], dtype), references[name], lowp_values[name], dtype, hdim)
            for name in GRADIENT_NAMES if name in kernel]
