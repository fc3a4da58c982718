"""The gate (fmha_mlir.tolerance) on a benchmark row's gradients, at a cost linear in the sequence length.

The float64 oracle of a whole S x S head costs O(S^2) memory and time on the host: minutes at S 16384. So
the row is judged on two cuts of batch 0 and the first kv head's query heads, each exact for what it
judges: dQ of the last `width` query rows (all keys; as the last rows of a square problem they see the
keys a causal top-left mask shows them when the cut is masked bottom-right), and dK, dV of the first
`width` keys (all queries; the lse and O given, so the cut keys' probabilities are the full problem's, and
the top-left mask is the same on the first keys). Both cuts cover the longest reductions: dQ's over every
key, dK's and dV's over every query.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from fmha_mlir import oracle
from fmha_mlir.spec import Mask
from fmha_mlir.tolerance import judge

WIDTH = 256   # query rows and keys in the cuts (several tiles of every body's table)


@dataclasses.dataclass(frozen=True)
class Problem:
    """One head group's inputs as float64 [1, heads, S, D] arrays (k, v: [1, 1, S, D]) and what judges them."""
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    o: np.ndarray
    do: np.ndarray
    lse: np.ndarray          # [1, heads, S], natural log
    mask: Mask               # none or causal_top_left
    scale: float
    gqa_ratio: int
    dtype: str
    numerics: object         # the lowp model's Numerics
    softcap: float = 0.0
    bias: np.ndarray | None = None   # [1, heads, S, S] additive bias, if any


@dataclasses.dataclass(frozen=True)
class References:
    """The oracle and lowp gradients of the two cuts: dq of the last rows, dk / dv of the first keys."""
    rows: slice
    keys: slice
    exact: dict[str, np.ndarray]
    lowp: dict[str, np.ndarray]
    magnitudes: dict[str, np.ndarray]


def _cut_mask(mask: Mask, rows: bool) -> Mask:
    if mask.kind not in ("none", "causal_top_left"):
        raise ValueError(f"the benchmark's gate cuts take no mask or causal top-left, not {mask.kind}")
    return Mask("causal_bottom_right") if rows and mask.kind == "causal_top_left" else mask


def references(problem: Problem, width: int = WIDTH) -> References:
    """Run the oracle and the lowp model on both cuts (the expensive part: once per row)."""
    seqlen = problem.q.shape[2]
    width = min(width, seqlen)
    rows, keys = slice(seqlen - width, seqlen), slice(0, width)
    p = problem
    cuts = {
        "rows": dict(q=p.q[:, :, rows], k=p.k, v=p.v, o=p.o[:, :, rows], do=p.do[:, :, rows], lse=p.lse[:, :, rows],
                     bias=None if p.bias is None else p.bias[:, :, rows], mask=_cut_mask(p.mask, True)),
        "keys": dict(q=p.q, k=p.k[:, :, keys], v=p.v[:, :, keys], o=p.o, do=p.do, lse=p.lse,
                     bias=None if p.bias is None else p.bias[:, :, :, keys], mask=_cut_mask(p.mask, False)),
    }
    exact, lowp, magnitudes = {}, {}, {}
    for cut, names in (("rows", ("dq",)), ("keys", ("dk", "dv"))):
        a = cuts[cut]
        inputs = tuple(a[n] for n in ("q", "k", "v", "o", "do", "lse"))
        args = dict(mask=a["mask"], scale=p.scale, gqa_ratio=p.gqa_ratio, softcap=p.softcap, bias=a["bias"])
        ref = oracle.backward(*inputs, **args)
        low = oracle.lowp_backward(*inputs, dtype=p.dtype, numerics=p.numerics, **args)
        for name in names:
            exact[name], lowp[name] = ref.named()[name], low.named()[name]
            if name in ref.term_magnitudes:
                magnitudes[name] = ref.term_magnitudes[name]
    return References(rows, keys, exact, lowp, magnitudes)


def gate(refs: References, grads: dict[str, np.ndarray], dtype: str, hdim: int) -> dict[str, dict]:
    """judge() of a contender's full-group gradients (float64 [1, heads, S, D], dk / dv [1, 1, S, D]) on the
    cuts: per gradient its ratio to the bound and whether it passed."""
    cut = {"dq": grads["dq"][:, :, refs.rows], "dk": grads["dk"][:, :, refs.keys], "dv": grads["dv"][:, :, refs.keys]}
    checks = [judge(name, cut[name], refs.exact[name], refs.lowp[name], dtype, hdim, refs.magnitudes.get(name))
              for name in ("dq", "dk", "dv")]
    return {c.name: {"ratio": c.ratio, "passed": bool(c.passed)} for c in checks}
