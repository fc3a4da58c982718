"""The one tolerance policy for kernel gradients (numpy only: importable without MLIR).

FlashAttention's rule, with CK's backward table as a floor. A kernel gradient G passes when

    max|G - oracle| <= FACTOR * max|lowp - oracle| + floor,    floor = atol + rtol * max|oracle|

oracle: the float64 backward (`oracle.backward`) from the same rounded inputs the kernel read.
lowp:   the same backward as a `dtype` kernel computes it (`oracle.lowp_backward`: f32 accumulation,
        P and dS rounded to dtype, outputs rounded to dtype). Its distance to the oracle measures the
        error any correct low-precision kernel may have on *this* problem; a kernel may be FACTOR times
        worse (different summation orders, atomics, exp2 approximations).
floor:  keeps the bound from reaching zero where that distance happens to be tiny (f32 kernels, or
        gradients that are exactly representable). (rtol, atol) come from `floor_tolerance`.

Every maximum is over the whole gradient tensor. A NaN or inf anywhere in a kernel output fails.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dtypes import STORAGE, from_storage
from .errors import Reason, SpecError
from .oracle import Gradients, is_positive_int

# FlashAttention's test suite allows the kernel twice the error of a same-precision PyTorch reference.
FACTOR = 2.0

# Seed 002 (CK's backward tests): rtol = atol, per dtype; bf16's 7-bit mantissa needs more room above
# hdim 128, where each dot product sums more rounded terms.
BF16_WIDE_HDIM = 128
_FLOOR = {"f16": 1.6e-2, "bf16": 2.0e-2, "bf16_wide": 3.2e-2}
# f32 (our choice): an f32 kernel differs from the float64 oracle only by summation order (atomics,
# key loops) and exp2's 1-2 ulp, about sqrt(terms) * 2^-24 ~ 1e-5 relative at thousands of terms.
# 1e-4 of the largest gradient leaves 10x margin and still catches one key or row dropped from a sum.
F32_RTOL = 1e-4
F32_ATOL = 1e-5

GRADIENT_NAMES = ("dq", "dk", "dv", "dbias")
REQUIRED_GRADIENTS = ("dq", "dk", "dv")


def floor_tolerance(dtype: str, hdim: int) -> tuple[float, float]:
    """(rtol, atol) of the floor for `dtype`; hdim is the larger of hdim_q and hdim_v."""
    if dtype not in STORAGE:
        raise SpecError([Reason("dtype", f"unknown element type {dtype!r}", f"use one of {', '.join(STORAGE)}")])
    if not is_positive_int(hdim):
        raise SpecError([Reason("hdim", f"must be a positive integer (got {hdim!r})")])
    if dtype == "f32":
        return F32_RTOL, F32_ATOL
    if dtype == "bf16" and hdim > BF16_WIDE_HDIM:
        return _FLOOR["bf16_wide"], _FLOOR["bf16_wide"]
    return _FLOOR[dtype], _FLOOR[dtype]


@dataclass(frozen=True)
class GradCheck:
    name: str
    max_abs_err: float   # max|kernel - oracle|; inf when the kernel output holds NaN or inf
    allowed: float       # FACTOR * lowp_err + floor
    passed: bool
    lowp_err: float      # max|lowp - oracle|
    floor: float         # atol + rtol * max|oracle|

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{self.name}: max|err| {self.max_abs_err:.3e} vs allowed {self.allowed:.3e} "
                f"({FACTOR:g} x lowp {self.lowp_err:.3e} + floor {self.floor:.3e}): {verdict}")


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


def check_gradients(kernel: dict, oracle: Gradients, lowp: Gradients, dtype: str, hdim: int) -> list[GradCheck]:
    """Judge each gradient in `kernel` ({"dq", "dk", "dv"} required, "dbias" optional; storage arrays or
    float values in logical shape) against the policy above. hdim = max(hdim_q, hdim_v)."""
    rtol, atol = floor_tolerance(dtype, hdim)
    references, lowp_values = oracle.named(), lowp.named()
    reasons = [Reason(name, "no such gradient", f"use {', '.join(GRADIENT_NAMES)}")
               for name in kernel if name not in GRADIENT_NAMES]
    reasons += [Reason(name, "missing from the kernel outputs") for name in REQUIRED_GRADIENTS if name not in kernel]
    reasons += [Reason(name, "the kernel gave dbias but the problem has no bias")
                for name in kernel if name == "dbias" and "dbias" not in references]
    reasons += [Reason(name, f"has shape {np.shape(kernel[name])}, the oracle's is {references[name].shape}")
                for name in GRADIENT_NAMES if name in kernel and name in references
                and np.shape(kernel[name]) != references[name].shape]
    if reasons:
        raise SpecError(reasons)

    checks = []
    for name in (n for n in GRADIENT_NAMES if n in kernel):
        reference = references[name]
        got = _kernel_values(name, kernel[name], dtype)
        lowp_err = _max_abs(lowp_values[name] - reference)
        floor = atol + rtol * _max_abs(reference)
        allowed = FACTOR * lowp_err + floor
        err = _max_abs(got - reference) if np.all(np.isfinite(got)) else float("inf")
        checks.append(GradCheck(name, err, allowed, err <= allowed, lowp_err, floor))
    return checks
