"""The variant matrix the issues name: dtype x mask kind x hdim x GQA ratio. One definition for the
compiler tests, the interpreter matrix and the GPU matrix tool. Importable without MLIR."""
from __future__ import annotations

import itertools

from .spec import DTYPES, AttentionBwdSpec, Mask

HDIMS = (64, 128, 256)
GQA_RATIOS = (1, 4)


def masks(window: Mask) -> tuple[Mask, ...]:
    """Every mask kind; the window's sizes are the caller's, to suit its sequence lengths."""
    return Mask(), Mask("causal_top_left"), Mask("causal_bottom_right"), window


def variant_matrix(window: Mask = Mask("sliding_window", 16, 0)) -> list[AttentionBwdSpec]:
    return [AttentionBwdSpec(dtype=d, hdim_q=h, gqa_ratio=g, mask=m)
            for d, m, h, g in itertools.product(DTYPES, masks(window), HDIMS, GQA_RATIOS)]
