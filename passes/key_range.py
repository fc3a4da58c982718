"""The keys [lo, hi) one query row can see under a mask, as index arithmetic.

The key loop runs over this range only, so masked keys cost nothing; a row that sees no key gets
hi <= lo and the loop runs no iteration (scf.for compares signed). Matches fmha_mlir.spec.Mask.visible:

    none:                [0, Sk)
    causal_top_left:     [0, min(Sk, q + 1))
    causal_bottom_right: [0, clamp(q + Sk - Sq + 1, 0, Sk))
    sliding_window:      [max(0, q + off - left), min(Sk, q + off + right + 1)), off = Sk - Sq,
                         a negative window size leaving that side unbounded
"""
from __future__ import annotations

from fmha_mlir.mlir import arith, ir
from fmha_mlir.spec import Mask

from .ir_builders import index


def diagonal(q: "ir.Value", seqlen_q: "ir.Value", seqlen_k: "ir.Value") -> "ir.Value":
    """q + (seqlen_k - seqlen_q): the last key a bottom-right causal row sees (signed; may be negative)."""
    return arith.addi(q, arith.subi(seqlen_k, seqlen_q))


def key_range(mask: Mask, q: "ir.Value", seqlen_q: "ir.Value", seqlen_k: "ir.Value"):
    """(lo, hi) index values of the keys query row `q` sees."""
    zero = index(0)
    if mask.kind == "none":
        return zero, seqlen_k
    if mask.kind == "causal_top_left":
        return zero, arith.minsi(seqlen_k, arith.addi(q, index(1)))
    last = diagonal(q, seqlen_q, seqlen_k)
    if mask.kind == "causal_bottom_right":
        hi = arith.addi(last, index(1))
        return zero, arith.minsi(seqlen_k, arith.maxsi(hi, zero))
    lo = zero
    if mask.window_left >= 0:
        lo = arith.maxsi(zero, arith.subi(last, index(mask.window_left)))
    hi = seqlen_k
    if mask.window_right >= 0:
        hi = arith.minsi(seqlen_k, arith.addi(last, index(mask.window_right + 1)))
    return lo, hi
