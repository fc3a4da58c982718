"""Checks the fmha lowering passes run before touching an op, so MLIR never sees invalid input."""
from __future__ import annotations

from fmha_mlir.dialects import fmha
from fmha_mlir.spec import AttentionBwdSpec
from fmha_mlir.target import TARGETS

from .base import PassFailure

WAVE_SIZES = tuple(sorted({t.wave_size for t in TARGETS.values()}))


def verified_spec(op) -> AttentionBwdSpec:
    """`op`'s spec after the fmha verifier accepted `op`; PassFailure with its problems otherwise."""
    problems = fmha.verify_op(op)
    if problems:
        raise PassFailure("invalid op: " + "; ".join(problems), op)
    return fmha.spec_from_op(op)


def check_wave_size(wave_size: int) -> None:
    """Reject a wave-size option no target has (ValueError: the registry reports it as a bad option)."""
    if wave_size not in WAVE_SIZES:
        raise ValueError(f"wave-size={wave_size} is not a wave size of any target; use one of "
                         f"{', '.join(map(str, WAVE_SIZES))}")
