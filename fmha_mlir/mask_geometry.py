"""Which (query, key) pairs a kernel computes, and what follows for a row, a key block and a tile:
written once over number-like values, so that the same function runs on Python ints (folded), on NumPy
arrays (spec.Mask.visible, the oracle, the interpreter, the tests) and on passes.ix.Ix (the index
arithmetic the lowering emits). `mask` is a spec.Mask (kind, window_left, window_right; a negative
window size leaves that side unbounded). Positions are never negative.

A pair is *shown* when the mask lets the query see the key and both lie inside the problem
(q < seqlen_q, k < seqlen_k). Tiles cover whole blocks, so a tile that crosses a sequence end (a tail)
holds positions the kernel never loaded (zero-filled): it is cut like a tile the mask cuts, and its
scores go through fmha.masked_score, never through zeros that are assumed to cancel.

Bottom-right alignment puts the diagonal of query q at key q + seqlen_k - seqlen_q (signed).
"""
from __future__ import annotations

from .index_math import ceildiv, maximum, minimum


def diagonal(q, seqlen_q, seqlen_k):
    """q + (seqlen_k - seqlen_q): the last key a bottom-right causal row sees (may be negative)."""
    return q + (seqlen_k - seqlen_q)


def visible(mask, q, k, seqlen_q, seqlen_k):
    """The mask's rule alone: whether query q may see key k (True, a Python bool, when every key is)."""
    if mask.kind == "none":
        return True
    if mask.kind == "causal_top_left":
        return k <= q
    last = diagonal(q, seqlen_q, seqlen_k)
    if mask.kind == "causal_bottom_right":
        return k <= last
    seen = True
    if mask.window_left >= 0:
        seen = k >= last - mask.window_left
    if mask.window_right >= 0:
        seen = seen & (k <= last + mask.window_right)
    return seen


def inside(q, k, seqlen_q, seqlen_k):
    """Whether (q, k) lies inside the problem: rows and keys past the sequence ends are padding."""
    return (q < seqlen_q) & (k < seqlen_k)


def shown(mask, q, k, seqlen_q, seqlen_k):
    """visible and inside: the pairs whose score is not -inf (what fmha.masked_score keeps)."""
    return visible(mask, q, k, seqlen_q, seqlen_k) & inside(q, k, seqlen_q, seqlen_k)


def key_range(mask, q, seqlen_q, seqlen_k):
    """(lo, hi): the keys query row q (< seqlen_q) sees are exactly [lo, hi); hi <= lo when it sees none
    (a loop over the range then runs no iteration)."""
    if mask.kind == "none":
        return 0, seqlen_k
    if mask.kind == "causal_top_left":
        return 0, minimum(seqlen_k, q + 1)
    last = diagonal(q, seqlen_q, seqlen_k)
    if mask.kind == "causal_bottom_right":
        return 0, minimum(seqlen_k, maximum(last + 1, 0))
    lo = 0 if mask.window_left < 0 else maximum(0, last - mask.window_left)
    hi = seqlen_k if mask.window_right < 0 else minimum(seqlen_k, last + (mask.window_right + 1))
    return lo, hi


def query_block_range(mask, k0, block_n: int, block_m: int, seqlen_q, seqlen_k):
    """[lo, hi) of the query blocks (of block_m rows) the key block [k0, k0 + block_n) visits: every block
    with a query that sees one of its keys is in it (hi may be <= lo). The range may hold a block whose
    queries see only keys past seqlen_k or none: that step is a tail, masked whole."""
    blocks = ceildiv(seqlen_q, block_m)
    if mask.kind == "none":
        return 0, blocks
    if mask.kind == "causal_top_left":      # k <= q: q >= k0
        return k0 // block_m, blocks
    off = seqlen_k - seqlen_q               # bottom-right alignment: k <= q + off
    if mask.kind == "causal_bottom_right":
        return maximum(0, (k0 - off) // block_m), blocks
    lo, hi = 0, blocks                      # window: q + off - left <= k <= q + off + right
    if mask.window_right >= 0:
        lo = maximum(0, (k0 - off - mask.window_right) // block_m)
    if mask.window_left >= 0:
        last = k0 + (block_n - 1) - off + mask.window_left
        hi = minimum(blocks, last // block_m + 1)
    return lo, hi


def key_block_range(mask, q0, block_m: int, block_n: int, seqlen_q, seqlen_k):
    """[lo, hi) of the key blocks whose query_block_range holds the query block starting at q0: its
    exact inverse (the range grows with the key block, so they are one contiguous run), the dQ partials
    deterministic mode's convert reads. Key block kb visits q0's block iff its first visited block is
    <= it (kb bn < q0 + block_m + off + right) and its last is >= it (kb bn + block_n - 1 >= q0 + off - left)."""
    blocks = ceildiv(seqlen_k, block_n)
    if mask.kind == "none":
        return 0, blocks
    end = q0 + block_m
    if mask.kind == "causal_top_left":
        return 0, minimum(blocks, ceildiv(end, block_n))
    off = seqlen_k - seqlen_q
    right = 0 if mask.kind == "causal_bottom_right" else mask.window_right
    lo, hi = 0, blocks
    if right >= 0:
        hi = minimum(blocks, maximum(0, ceildiv(end + off + right, block_n)))
    if mask.kind == "sliding_window" and mask.window_left >= 0:
        lo = maximum(0, (q0 + off - mask.window_left) // block_n)
    return lo, hi


def tile_cut(mask, q0, block_m: int, k0, block_n: int, seqlen_q, seqlen_k):
    """Whether the tile [q0, q0 + block_m) x [k0, k0 + block_n) holds a pair that is not shown: the mask
    hides one, or the tile crosses seqlen_q or seqlen_k (a tail). Only such tiles need masked scores."""
    tail = key_tail(k0, block_n, seqlen_k) | (q0 + block_m > seqlen_q)
    return _mask_cuts(mask, q0, block_m, k0, block_n, seqlen_q, seqlen_k) | tail


def key_tail(k0, block_n: int, seqlen_k):
    """Whether the key block [k0, k0 + block_n) crosses seqlen_k: every tile of it holds padded keys."""
    return k0 + block_n > seqlen_k


def hides_nothing(mask) -> bool:
    """Whether the mask's rule shows every pair: then only tails are cut (tile_cut)."""
    return mask.kind == "none"


def _mask_cuts(mask, q0, block_m: int, k0, block_n: int, seqlen_q, seqlen_k):
    """Whether the mask's rule hides a pair of the (whole) tile; False when it hides none anywhere."""
    k_last = k0 + (block_n - 1)
    if mask.kind == "none":
        return False
    if mask.kind == "causal_top_left":      # the last key must stay at or below the first query
        return k_last > q0
    off = seqlen_k - seqlen_q
    if mask.kind == "causal_bottom_right":
        return k_last > q0 + off
    cut = False
    if mask.window_left >= 0:               # the first key must stay in reach of the last query
        cut = k0 < q0 + (block_m - 1) + off - mask.window_left
    if mask.window_right >= 0:
        cut = cut | (k_last > q0 + off + mask.window_right)
    return cut
