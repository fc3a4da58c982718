"""NumPy oracles of attention forward and backward (numpy only: importable without MLIR).

All functions take tensors in the logical layout of docs/ir.md (q [B,Hq,Sq,Dq], k [B,Hk,Sk,Dq],
v [B,Hk,Sk,Dv], o/do [B,Hq,Sq,Dv], lse [B,Hq,Sq]) holding the values a kernel reads (already rounded to
its dtype). The oracle computes in float64; `lowp_backward` models a low-precision kernel (f32
accumulation in the kernel's summation order, P / dS / outputs rounded to the dtype as the kernel's body
rounds them, `fmha_mlir.numerics`) for the tolerance policy.

Scores are S = scale * Q K^T + bias, -inf where `mask` hides the key. A row that sees no key has
lse = +inf, O = 0 and zero gradients (FlashAttention's convention), never NaN. The backward recomputes
P = exp(S - lse) from lse, as the kernels do, then
    D = rowsum(dO * O),  dS = P * (dO V^T - D)   (dS is the gradient of L wrt S, so dbias = dS)
    dQ = scale * dS K,   dK = scale * dS^T Q,   dV = P^T dO   (dK, dV summed over each GQA group).

Sinks (gpt-oss): a logit sink_h per query head joins each row's softmax denominator, lse = log(sum_j
exp(S_j) + exp(sink_h)) (finite even for a row that sees no key), O = sum_j P_j V_j. P, D and dS keep
their form; dsinks_h = -sum over the head's rows and batches of exp(sink_h - lse) D. An lse gradient
dlse (L depends on the lse too) adds P dlse to dS: D becomes D - dlse, in dS and in dsinks alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .dtypes import STORAGE, round_to
from .errors import Reason, SpecError
from .numerics import MATRIX_K16, Numerics
from .spec import Mask, scale_reasons, softcap_reasons


@dataclass(frozen=True, eq=False)
class Forward:
    o: np.ndarray     # [B, Hq, Sq, Dv]
    p: np.ndarray     # [B, Hq, Sq, Sk] softmax probabilities, 0 where masked
    lse: np.ndarray   # [B, Hq, Sq] natural log, +inf for a row that sees no key


@dataclass(frozen=True, eq=False)
class Gradients:
    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    d: np.ndarray                     # [B, Hq, Sq] rowsum(dO * O), the dot_do_o stage's result
    dbias: np.ndarray | None = None   # shaped like the bias; None without a bias
    dalibi_slopes: np.ndarray | None = None   # shaped like the ALiBi slopes; None without them
    dsinks: np.ndarray | None = None          # [Hq], f32 in every dtype; None without sinks
    # Per gradient whose f32 rounding noise the gate models (tolerance), per element in its shape what
    # that noise scales with: sum |term| of d(slopes)'s cancelling sum; dS's rounding carried into dQ, dK, dbias.
    term_magnitudes: dict = field(default_factory=dict)

    def named(self) -> dict[str, np.ndarray]:
        """The gradients a kernel outputs, by buffer name (dbias, dalibi_slopes only when there are some)."""
        out = {"dq": self.dq, "dk": self.dk, "dv": self.dv}
        for name in ("dbias", "dalibi_slopes", "dsinks"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


# ---------------------------------------------------------------------------------------------------
# masks and biases

def visible_matrix(mask: Mask, seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """[Sq, Sk] booleans: which keys each query row sees (spec.Mask.visible is the one definition)."""
    rows = np.arange(seqlen_q).reshape(-1, 1)
    cols = np.arange(seqlen_k).reshape(1, -1)
    return np.broadcast_to(mask.visible(rows, cols, seqlen_q, seqlen_k), (seqlen_q, seqlen_k))


def alibi_slopes(heads: int) -> np.ndarray:
    """The usual geometric ALiBi slopes 2^(-8 (h+1) / heads), one per query head."""
    return 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)


def alibi_distance(seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """[Sq, Sk] |i + Sk - Sq - j|: ALiBi's distance, bottom-right aligned as FlashAttention's."""
    rows = np.arange(seqlen_q).reshape(-1, 1)
    cols = np.arange(seqlen_k).reshape(1, -1)
    return np.abs(rows + (seqlen_k - seqlen_q) - cols)


def alibi_bias(slopes, seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """ALiBi as an elementwise bias: -slope * |i + Sk - Sq - j| (-slope * |i - j| when Sq == Sk).
    slopes [Hq] or [B, Hq] -> bias [Hq, Sq, Sk] or [B, Hq, Sq, Sk]."""
    return -np.asarray(slopes, dtype=np.float64)[..., None, None] * alibi_distance(seqlen_q, seqlen_k)


def _with_slopes(bias, alibi_slopes, q, k):
    """The bias the scores get: `bias`, or ALiBi's from `alibi_slopes` ([Hq] or [B, Hq]); not both."""
    if alibi_slopes is None:
        return bias
    if bias is not None:
        raise SpecError([Reason("alibi_slopes", "given together with a bias", "give one of bias, alibi_slopes")])
    slopes = np.asarray(alibi_slopes, dtype=np.float64)
    heads = np.shape(q)[1] if np.ndim(q) == 4 else None
    if slopes.ndim not in (1, 2) or slopes.shape[-1] != heads:
        raise SpecError([Reason("alibi_slopes", f"has shape {slopes.shape}; expected [heads_q] or [batch, heads_q] "
                                                f"with heads_q = {heads}")])
    return alibi_bias(slopes, np.shape(q)[2], np.shape(k)[2])


# ---------------------------------------------------------------------------------------------------
# validation

def is_positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_problem(q, k, v, *, mask: Mask, scale, gqa_ratio, o=None, do=None, lse=None, bias=None,
                   softcap=0.0, sinks=None, dlse=None):
    """Raise SpecError naming every tensor whose shape does not fit the others."""
    reasons = list(mask.reasons()) + scale_reasons(scale, "pass the scale the kernels use") + softcap_reasons(softcap)
    if not is_positive_int(gqa_ratio):
        reasons.append(Reason("gqa_ratio", f"must be a positive integer (got {gqa_ratio!r})"))
    for name, x in (("q", q), ("k", k), ("v", v)):
        if np.ndim(x) != 4 or 0 in np.shape(x):
            reasons.append(Reason(name, "must be rank 4 [batch, heads, seqlen, hdim] with no empty dimension "
                                        f"(got shape {np.shape(x)})"))
    if reasons:
        raise SpecError(reasons)
    (b, hq, sq, dq), (_, _, sk, _), dv = np.shape(q), np.shape(k), np.shape(v)[3]
    expected = {
        "k": (b, hq // gqa_ratio, sk, dq), "v": (b, hq // gqa_ratio, sk, dv),
        "o": (b, hq, sq, dv), "do": (b, hq, sq, dv), "lse": (b, hq, sq), "dlse": (b, hq, sq), "sinks": (hq,),
    }
    if hq % gqa_ratio:
        reasons.append(Reason("q", f"heads_q = {hq} is not a multiple of gqa_ratio = {gqa_ratio}",
                              "use heads_q = heads_kv * gqa_ratio"))
    for name, x in (("k", k), ("v", v), ("o", o), ("do", do), ("lse", lse), ("dlse", dlse), ("sinks", sinks)):
        if x is not None and np.shape(x) != expected[name]:
            reasons.append(Reason(name, f"has shape {np.shape(x)}, expected {expected[name]} "
                                        f"from q {np.shape(q)}, v's hdim {dv} and gqa_ratio {gqa_ratio}"))
    if bias is not None:
        scores = (b, hq, sq, sk)
        try:
            fits = np.ndim(bias) <= 4 and np.broadcast_shapes(np.shape(bias), scores) == scores
        except ValueError:
            fits = False
        if not fits:
            reasons.append(Reason("bias", f"shape {np.shape(bias)} does not broadcast to the scores {scores}"))
    if reasons:
        raise SpecError(reasons)


# ---------------------------------------------------------------------------------------------------
# shared numerics

@dataclass(frozen=True)
class _Arithmetic:
    """How a reference computes: its accumulation type, the rounding of a value stored in the element
    type (the outputs), whether P and dS get that rounding before they meet T operands, and the chunk
    size of the sequential long reductions (None: one exact matmul)."""

    acc: type
    store: Callable[[np.ndarray], np.ndarray]
    round_p_ds: bool = False
    sum_chunk: int | None = None
    dq_add_block: int = 0           # > 0: dQ added in the element type once per this many keys
    kernel_exponent: bool = False   # P's exponent formed as the kernels form it (_probabilities)

    def operand(self, x: np.ndarray) -> np.ndarray:
        """P or dS as the products see it."""
        return self.store(x) if self.round_p_ds else x


_EXACT = _Arithmetic(np.float64, lambda x: x)


def _lowp_arithmetic(dtype: str, numerics: Numerics) -> _Arithmetic:
    if dtype not in STORAGE:
        raise SpecError([Reason("dtype", f"unknown element type {dtype!r}", f"use one of {', '.join(STORAGE)}")])
    if not isinstance(numerics, Numerics):
        raise SpecError([Reason("numerics", f"must be a fmha_mlir.numerics.Numerics (got {numerics!r})")])
    return _Arithmetic(np.float32, lambda x: round_to(x, dtype).astype(np.float32), numerics.round_p_ds,
                       numerics.sum_chunk, numerics.dq_add_block, kernel_exponent=True)


def _swap(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _expand_kv(x: np.ndarray, gqa_ratio: int) -> np.ndarray:
    """kv heads -> query heads: query head h reads kv head h // gqa_ratio."""
    return np.repeat(x, gqa_ratio, axis=1)


def _reduce_kv(x: np.ndarray, gqa_ratio: int) -> np.ndarray:
    """Sum a per-query-head gradient over each GQA group (the inverse of _expand_kv)."""
    b, hq, s, d = x.shape
    return x.reshape(b, hq // gqa_ratio, gqa_ratio, s, d).sum(axis=2)


def _sequential_matmul(a: np.ndarray, b: np.ndarray, chunk: int | None, gqa_ratio: int = 1) -> np.ndarray:
    """a @ b [B, H, M, K] x [B, H, K, N] summed over K (and, with gqa_ratio > 1, over each group of
    heads, into [B, H / gqa_ratio, M, N]) as a kernel sums: `chunk` terms per partial product, the
    partial products added one after the other in a's dtype. chunk None: one matmul (exact oracle)."""
    if chunk is None:
        return _reduce_kv(a @ b, gqa_ratio) if gqa_ratio > 1 else a @ b
    batch, heads, m, k = a.shape
    groups = heads // gqa_ratio
    a = a.reshape(batch, groups, gqa_ratio, m, k)
    b = b.reshape(batch, groups, gqa_ratio, k, b.shape[-1])
    out = np.zeros((batch, groups, m, b.shape[-1]), dtype=a.dtype)
    for head in range(gqa_ratio):  # a group's heads one after the other, as a work-group loops over them
        for start in range(0, k, chunk):
            out += a[:, :, head, :, start:start + chunk] @ b[:, :, head, start:start + chunk]
    return out


def _blockwise_dq(ds: np.ndarray, k_exp: np.ndarray, scale, arith: _Arithmetic) -> np.ndarray:
    """dQ as bf16 atomics build it: per key block of arith.dq_add_block keys an f32 partial (summed as
    _sequential_matmul sums), scaled and rounded to the dtype, then added to the running dQ, itself
    rounded after every add (the packed atomic's round to nearest even). Key blocks in ascending order:
    the atomics' order is free, and the gate's factor covers the difference."""
    block = arith.dq_add_block
    out = np.zeros(ds.shape[:-1] + k_exp.shape[-1:], dtype=arith.acc)
    for start in range(0, ds.shape[-1], block):
        part = _sequential_matmul(ds[..., start:start + block], k_exp[:, :, start:start + block], arith.sum_chunk)
        out = arith.store(out + arith.store(part * scale))
    return out


def _sequential_sum(x: np.ndarray, chunk: int | None) -> np.ndarray:
    """x summed over its last axis as a kernel sums: `chunk` terms per partial sum, the partials added
    one after the other in x's dtype; chunk None: one exact sum."""
    if chunk is None:
        return x.sum(axis=-1)
    out = np.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.shape[-1], chunk):
        out += x[..., start:start + chunk].sum(axis=-1)
    return out


def _reduce_to_shape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum x over the dimensions that were broadcast from `shape` (the gradient of a broadcast)."""
    x = x.sum(axis=tuple(range(x.ndim - len(shape))))
    kept = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=kept, keepdims=True)


def _scores(q, k_exp, *, mask: Mask, scale, bias, acc, softcap=0.0):
    """(S, t): S = scale * Q K^T (through c tanh(. / c) with softcap c > 0) + bias in `acc`, -inf where
    masked; t the tanh (what the softcap's derivative 1 - t^2 needs), None without softcap. tanh is
    exact math in `acc` (np.tanh): a kernel's approximation of it is not modelled, it must pass."""
    s = (q @ _swap(k_exp)) * acc(scale)
    t = None
    if softcap:
        t = np.tanh(s / acc(softcap))
        s = acc(softcap) * t
    if bias is not None:
        s = s + np.asarray(bias, dtype=acc)
    visible = visible_matrix(mask, q.shape[2], k_exp.shape[2])
    return np.where(visible, s, acc(-np.inf)), t


def _probabilities(core, bias, lse, arith: _Arithmetic, natural: bool) -> np.ndarray:
    """P = exp(core + bias - lse) (core -inf where masked). lse = +inf (a row that sees no key) and -inf
    scores both give exp(-inf) = 0: no NaN. A kernel with softcap or a bias forms the exponent as
    core + (bias - lse), the difference rounded once at its own size (passes/score_mods.py,
    natural_units; for ALiBi one fma of the exact product): the same-dtype reference does so too."""
    lse = lse[..., None]
    if arith.kernel_exponent and natural:
        shifted = -lse if bias is None else np.asarray(bias, dtype=np.float64) - np.asarray(lse, dtype=np.float64)
        return np.exp(core + shifted.astype(arith.acc))
    s = core if bias is None else core + np.asarray(bias, dtype=arith.acc)
    return np.exp(s - lse)


@dataclass(frozen=True, eq=False)
class _Terms:
    """The backward's per-score intermediates, shared by the full and the key-tiled dQ."""

    q: np.ndarray
    k_exp: np.ndarray   # k expanded to the query heads
    do: np.ndarray
    p: np.ndarray
    ds: np.ndarray        # dL / d(scale Q K^T): what the dQ and dK products take
    d: np.ndarray
    ds_score: np.ndarray  # dL / dS of the final scores: dbias
    # The oracle's error model of dS (None in a lowp reference): per score, what the f32 rounding of
    # dS's inputs scales with (_ds_rounding_scale); ds_score's, and ds's with the softcap factor.
    ds_score_rounding: np.ndarray | None = None
    ds_rounding: np.ndarray | None = None
    lse: np.ndarray | None = None     # [B, Hq, Sq] as the backward read it (dsinks)
    d_rounding: np.ndarray | None = None  # [B, Hq, Sq] what D's f32 rounding scales with (the model)


def _sink_probability(sinks, lse, acc) -> np.ndarray:
    """[B, Hq, Sq] exp(sink_h - lse): the share of each row's softmax the sink takes, 0 where the lse is
    -inf (a row without keys or sink, torch's convention; exp(+inf) x 0 would be NaN) or +inf."""
    shifted = (np.asarray(sinks, dtype=np.float64)[None, :, None] - np.asarray(lse, dtype=np.float64)).astype(acc)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.isfinite(lse), np.exp(shifted), acc(0))


def _ds_rounding_scale(p, do, v_exp, d_rounding) -> np.ndarray:
    """P * (sum_d |dO_d V_d| + d_rounding) per score: dP = dO . V and D = dO . O are f32 inner
    products over the head dim, each off by up to ~u32 x its sum of |term| (products of two dtype
    values are exact in f32; only the sums round), so dS = P (dP - D) is off by ~u32 x this. Where
    dP - D cancels (one visible key: P = 1, O = V) that rounding is all of dS."""
    return p * (np.abs(do) @ _swap(np.abs(v_exp)) + d_rounding[..., None])


def _d_rounding_scale(do, o, dlse) -> np.ndarray:
    """sum_d |dO_d O_d| (+ |dlse|) per row: D's f32 inner product is off by ~u32 x its sum of |term|,
    and D - dlse rounds once more at most at that size."""
    scale = np.sum(np.abs(do * o), axis=-1)
    return scale if dlse is None else scale + np.abs(dlse)


def _backward_terms(q, k, v, o, do, lse, *, mask, scale, gqa_ratio, bias, arith: _Arithmetic,
                    softcap=0.0, rounding_model: bool = False, dlse=None) -> _Terms:
    _check_problem(q, k, v, mask=mask, scale=scale, gqa_ratio=gqa_ratio, o=o, do=do, lse=lse, bias=bias,
                   softcap=softcap, dlse=dlse)
    q, k, v, o, do, lse = (np.asarray(x, dtype=arith.acc) for x in (q, k, v, o, do, lse))
    k_exp = _expand_kv(k, gqa_ratio)
    core, t = _scores(q, k_exp, mask=mask, scale=scale, bias=None, acc=arith.acc, softcap=softcap)
    p = _probabilities(core, bias, lse, arith, natural=bool(softcap) or bias is not None)
    d = np.sum(do * o, axis=-1)
    if dlse is not None:   # dL/dS gains P dlse: the same as D - dlse in dS = P (dP - D)
        dlse = np.asarray(dlse, dtype=arith.acc)
        d = d - dlse
    v_exp = _expand_kv(v, gqa_ratio)
    dp = do @ _swap(v_exp)
    ds_score = p * (dp - d[..., None])
    # d(c tanh(x / c)) / dx = 1 - tanh^2(x / c)
    slope = None if t is None else arith.acc(1) - t * t
    ds = ds_score if t is None else ds_score * slope
    d_rounding = _d_rounding_scale(do, o, dlse) if rounding_model else None
    rounding = _ds_rounding_scale(p, do, v_exp, d_rounding) if rounding_model else None
    rounding_ds = rounding * slope if rounding is not None and slope is not None else rounding
    return _Terms(q, k_exp, do, p, ds, d, ds_score, rounding, rounding_ds, lse, d_rounding)


def _sink_gradient(terms: _Terms, sinks, arith: _Arithmetic, magnitudes: dict) -> np.ndarray:
    """dsinks [Hq] = -sum over batch and rows of exp(sink - lse) D (D - dlse with an lse gradient), the
    rows summed one after the other in f32 by a lowp reference. The oracle's model of its f32 noise
    (magnitudes["dsinks"]): per row, the sink's probability times D's rounding (_d_rounding_scale) plus
    |D| times exp's relative error: the exponent sink - lse and its log2 e factor each rounded (2 |x|),
    exp2's 2 ulps (4), the product (1)."""
    probability = _sink_probability(sinks, terms.lse, arith.acc)
    terms_ = -(probability * terms.d)
    per_head = np.moveaxis(terms_, 1, -1).reshape(-1, terms_.shape[1])   # [B x Sq, Hq]
    if arith.acc == np.float64:
        out = per_head.sum(axis=0)
    else:
        out = np.zeros(per_head.shape[1], dtype=arith.acc)
        for row in per_head:   # the kernels' order is free; one sequential f32 sum draws its noise
            out += row
    if terms.d_rounding is not None:
        with np.errstate(invalid="ignore"):   # a -inf sink of a row whose lse is -inf: no term (probability 0)
            exponent = np.abs(np.asarray(sinks, dtype=np.float64)[None, :, None] - terms.lse)
        error = probability * (terms.d_rounding + (5 + 2 * np.where(np.isfinite(exponent), exponent, 0))
                               * np.abs(terms.d))
        magnitudes["dsinks"] = error.sum(axis=(0, 2))
    return out.astype(np.float64)


def _gradients(terms: _Terms, *, scale, gqa_ratio, bias, arith: _Arithmetic, alibi_slopes=None,
               sinks=None) -> Gradients:
    scale = arith.acc(scale)
    p, ds = arith.operand(terms.p), arith.operand(terms.ds)
    dq = (_blockwise_dq(ds, terms.k_exp, scale, arith) if arith.dq_add_block
          else _sequential_matmul(ds, terms.k_exp, arith.sum_chunk) * scale)
    dk = _sequential_matmul(_swap(ds), terms.q, arith.sum_chunk, gqa_ratio) * scale
    dv = _sequential_matmul(_swap(p), terms.do, arith.sum_chunk, gqa_ratio)
    has_dbias = bias is not None and alibi_slopes is None
    dbias = arith.store(_reduce_to_shape(terms.ds_score, np.shape(bias))) if has_dbias else None
    out = [None if g is None else arith.store(g).astype(np.float64) for g in (dq, dk, dv, dbias)]
    dslopes, magnitudes = None, {}
    if terms.ds_rounding is not None:   # dS's rounding, carried through the products as |dS| would be
        magnitudes["dq"] = scale * (terms.ds_rounding @ np.abs(terms.k_exp))
        magnitudes["dk"] = scale * _reduce_kv(_swap(terms.ds_rounding) @ np.abs(terms.q), gqa_ratio)
        if has_dbias:
            magnitudes["dbias"] = _reduce_to_shape(terms.ds_score_rounding, np.shape(bias))
    if alibi_slopes is not None:   # d score / d slope = -distance; the slopes are f32 whatever the dtype
        distance = alibi_distance(*terms.ds_score.shape[2:]).astype(arith.acc)
        # A long reduction like dQ's: each query row's keys in chunks, then the rows, one after the other.
        rows = _sequential_sum(terms.ds_score * -distance, arith.sum_chunk)
        per_head = _sequential_sum(rows, 1 if arith.sum_chunk else None)
        dslopes = _reduce_to_shape(per_head, np.shape(alibi_slopes)).astype(np.float64)
        magnitudes["dalibi_slopes"] = _reduce_to_shape(
            np.abs(terms.ds_score.astype(np.float64) * distance).sum(axis=(-1, -2)), np.shape(alibi_slopes))
    dsinks = None if sinks is None else _sink_gradient(terms, sinks, arith, magnitudes)
    return Gradients(out[0], out[1], out[2], terms.d.astype(np.float64), out[3], dslopes, dsinks, magnitudes)


# ---------------------------------------------------------------------------------------------------
# public oracles

def forward(q, k, v, *, mask: Mask, scale: float, gqa_ratio: int, bias=None, softcap: float = 0.0,
            alibi_slopes=None, sinks=None) -> Forward:
    """Attention forward in float64: O, P and the natural-log lse (+inf for rows that see no key and no
    sink). With sinks ([Hq] logits) each row's denominator includes exp(sink_h): P sums to less than 1."""
    bias = _with_slopes(bias, alibi_slopes, q, k)
    _check_problem(q, k, v, mask=mask, scale=scale, gqa_ratio=gqa_ratio, bias=bias, softcap=softcap, sinks=sinks)
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s, _ = _scores(q, _expand_kv(k, gqa_ratio), mask=mask, scale=scale, bias=bias, acc=np.float64, softcap=softcap)
    sink = (np.full(s.shape[:-1], -np.inf) if sinks is None
            else np.broadcast_to(np.asarray(sinks, dtype=np.float64)[None, :, None], s.shape[:-1]))
    row_max = np.maximum(s.max(axis=-1), sink)
    empty = row_max == -np.inf
    shift = np.where(empty, 0.0, row_max)
    e = np.exp(s - shift[..., None])
    total = np.where(empty, 1.0, e.sum(axis=-1) + np.exp(sink - shift))
    p = e / total[..., None]
    lse = np.where(empty, np.inf, shift + np.log(total))
    return Forward(o=p @ _expand_kv(v, gqa_ratio), p=p, lse=lse)


def backward(q, k, v, o, do, lse, *, mask: Mask, scale: float, gqa_ratio: int, bias=None,
             softcap: float = 0.0, alibi_slopes=None, sinks=None, dlse=None) -> Gradients:
    """dQ, dK, dV (and dbias, shaped like `bias`, or d(slopes), shaped like `alibi_slopes`; dsinks [Hq]
    with sinks) in float64, with P recomputed from `lse` (which includes the sinks); dlse: the lse's
    gradient [B, Hq, Sq]."""
    bias = _with_slopes(bias, alibi_slopes, q, k)
    _check_problem(q, k, v, mask=mask, scale=scale, gqa_ratio=gqa_ratio, sinks=sinks)
    args = dict(mask=mask, scale=scale, gqa_ratio=gqa_ratio, bias=bias)
    terms = _backward_terms(q, k, v, o, do, lse, arith=_EXACT, softcap=softcap, rounding_model=True, dlse=dlse,
                            **args)
    return _gradients(terms, scale=scale, gqa_ratio=gqa_ratio, bias=bias, arith=_EXACT, alibi_slopes=alibi_slopes,
                      sinks=sinks)


def lowp_backward(q, k, v, o, do, lse, *, dtype: str, mask: Mask, scale: float, gqa_ratio: int,
                  bias=None, numerics: Numerics = MATRIX_K16, softcap: float = 0.0, alibi_slopes=None,
                  sinks=None, dlse=None) -> Gradients:
    """The backward as a `dtype` kernel with `numerics` computes it: f32 arithmetic, the long reductions
    summed in the kernel's order, P and dS rounded to `dtype` before they multiply dtype operands when
    the body does so, tanh (softcap) as np.tanh in f32, outputs rounded to `dtype` (values as
    float64). The tolerance policy measures how far this lands from the float64 oracle."""
    arith = _lowp_arithmetic(dtype, numerics)
    bias = _with_slopes(bias, alibi_slopes, q, k)
    _check_problem(q, k, v, mask=mask, scale=scale, gqa_ratio=gqa_ratio, sinks=sinks)
    args = dict(mask=mask, scale=scale, gqa_ratio=gqa_ratio, bias=bias)
    terms = _backward_terms(q, k, v, o, do, lse, arith=arith, softcap=softcap, dlse=dlse, **args)
    return _gradients(terms, scale=scale, gqa_ratio=gqa_ratio, bias=bias, arith=arith, alibi_slopes=alibi_slopes,
                      sinks=sinks)


def backward_deterministic_dq(q, k, v, o, do, lse, *, mask: Mask, scale: float, gqa_ratio: int,
                              tile_k: int, bias=None) -> tuple[np.ndarray, np.ndarray]:
    """dQ as a deterministic kernel builds it: key tile t (keys [t*tile_k, (t+1)*tile_k)) writes its own
    buffer, then the buffers are summed in tile order. Returns (dq, buffers [n_tiles, B, Hq, Sq, Dq])."""
    if not is_positive_int(tile_k):
        raise SpecError([Reason("tile_k", f"must be a positive integer (got {tile_k!r})")])
    terms = _backward_terms(q, k, v, o, do, lse, mask=mask, scale=scale, gqa_ratio=gqa_ratio, bias=bias,
                            arith=_EXACT)
    seqlen_k = terms.k_exp.shape[2]
    buffers = np.stack([
        (terms.ds[..., start:start + tile_k] @ terms.k_exp[:, :, start:start + tile_k]) * scale
        for start in range(0, seqlen_k, tile_k)
    ])
    dq = np.zeros_like(buffers[0])
    for buffer in buffers:  # a fixed summation order is the point of deterministic mode
        dq += buffer
    return dq, buffers


def finite_difference_check(q, k, v, do, *, mask: Mask, scale: float, gqa_ratio: int, bias=None,
                            samples: int = 6, eps: float = 1e-5, seed: int = 0, softcap: float = 0.0,
                            alibi_slopes=None, sinks=None, dlse=None) -> float:
    """Max relative error of `backward` against central differences of L = sum(O * dO) (+ sum(lse *
    dlse) over the rows whose lse is finite, with dlse), over `samples` random elements of each of q, k,
    v (and bias, alibi_slopes or sinks). The error of one element is
    |analytic - numeric| / max(|analytic|, |numeric|, 1e-3 * max|gradient tensor|, 1e-6): the floor
    keeps elements whose gradient is (near) zero from dividing round-off by zero."""
    inputs = {"q": q, "k": k, "v": v}
    if bias is not None:
        inputs["bias"] = bias
    if alibi_slopes is not None:
        inputs["alibi_slopes"] = alibi_slopes
    if sinks is not None:
        inputs["sinks"] = sinks
    inputs = {name: np.array(x, dtype=np.float64) for name, x in inputs.items()}
    do = np.asarray(do, dtype=np.float64)

    def options(values):
        return dict(mask=mask, scale=scale, gqa_ratio=gqa_ratio, bias=values.get("bias"), softcap=softcap,
                    alibi_slopes=values.get("alibi_slopes"), sinks=values.get("sinks"))

    def loss(values: dict[str, np.ndarray]) -> float:
        fwd = forward(values["q"], values["k"], values["v"], **options(values))
        lse_term = 0.0 if dlse is None else np.sum(np.where(np.isfinite(fwd.lse), fwd.lse * dlse, 0.0))
        return float(np.sum(fwd.o * do) + lse_term)

    fwd = forward(inputs["q"], inputs["k"], inputs["v"], **options(inputs))
    grads = backward(inputs["q"], inputs["k"], inputs["v"], fwd.o, do, fwd.lse, dlse=dlse, **options(inputs))
    analytic = {"q": grads.dq, "k": grads.dk, "v": grads.dv, "bias": grads.dbias, "alibi_slopes": grads.dalibi_slopes,
                "sinks": grads.dsinks}
    rng = np.random.default_rng(seed)
    worst = 0.0
    for name, x in inputs.items():
        floor = max(1e-3 * float(np.max(np.abs(analytic[name]))), 1e-6)
        for flat in rng.choice(x.size, size=min(samples, x.size), replace=False):
            index = np.unravel_index(flat, x.shape)
            original = x[index]
            x[index] = original + eps
            plus = loss(inputs)
            x[index] = original - eps
            minus = loss(inputs)
            x[index] = original
            numeric = (plus - minus) / (2 * eps)
            exact = float(analytic[name][index])
            worst = max(worst, abs(exact - numeric) / max(abs(exact), abs(numeric), floor))
    return worst
