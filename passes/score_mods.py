"""Score modifications every body applies the same way: softcap, a bias tensor and ALiBi.

A bias is added after the softcap (FlashAttention's order), through one interface (ScoreBias.of):
`shifted(q, k, lse)` is what it adds to the scores at those positions minus the row's lse (the
exponent's natural-units form, natural_units), `grad(dS, q, k)` takes dS = dL/dscore,
which is dbias itself and, times -|distance|, the slope's gradient. Positions past a sequence's end
(the tiled bodies' padded rows and keys) read a zero bias and contribute no gradient.

- bias = "elementwise": bias[b', h', q, k] of a [1 or B, 1 or H, Sq, Sk] tensor (b' = min(b, dim 0 - 1):
  a size-1 dim is broadcast), in T; dbias by f32 atomics into the same shape (bodies.bias_accumulation),
  or in deterministic mode by stores into a [B, Hq, Sq, Sk] workspace whose broadcast dims the convert sums.
- bias = "alibi": -slope_h |q + Sk - Sq - k| (bottom-right alignment; oracle.alibi_bias), with the
  standard geometric slopes 2^(-8 (h + 1) / H) of query head h of H computed in the kernel, or read from
  an f32 [1 or B, H] tensor (alibi_slopes); d(slopes)[b', h] = sum over q, k of dS * -|distance|, summed
  by the body and added once per (wave, step) (`add_slope_grad`).

With softcap c > 0 a score is s = c tanh(x / c), x = scale q.k, before the mask and the softmax; the
backward multiplies dS by ds/dx = 1 - tanh^2(x / c) (the products then apply `scale` as without it).
tanh comes from fmha.exp2, which every target has (AMD has no math.tanh without ROCm's device
libraries): tanh(y) = 1 - 2 / (2^(2 y log2 e) + 1), saturating to +-1 as 2^... goes to inf or 0; in f32
an odd series replaces it near 0, where it cancels (`_tanh`). The gate's references take tanh exactly
(np.tanh): they model how a body rounds, never the approximations it chooses (ex2.approx, the
approximate division, this tanh), which must pass against them in every dtype; the interpreter gives
exp2 and the approximate division their hardware error (fmha_mlir/runtime/interp/ops_arith.py).
"""
from __future__ import annotations

import math

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, ir, memref, scf, vector
from fmha_mlir.spec import AttentionBwdSpec

from .ir_builders import accumulate, create_op, f32, index, scalar_elements, splat, to_f32, vector_shape

LOG2_E = math.log2(math.e)


def natural_units(spec: AttentionBwdSpec) -> bool:
    """Whether the bodies form the exponent of P in natural units, 2^((s - lse) log2 e) with
    s - lse = core + (bias - lse) (softcap or a bias: core = c tanh(.) or scale dot), rather than the
    fast form 2^(dot scale log2 e - lse log2 e). The fast form rounds dot scale log2 e and lse log2 e
    apart, and s = core + bias would round at |s|: an ALiBi score of -300 then carries ~2e-5 in every
    P of its row. That is invisible in dQ / dK / dV (rounded to T) but not in f32 d(slopes), where
    sum_k dS = 0 cancels 1000-fold (H200: 3.3x the gate's bound, reports/bench_notes.md). bias -
    lse of two close values rounds at the size of their difference (ALiBi's is one fma)."""
    return bool(spec.softcap) or spec.bias != "none"


def softmax_input(dot: "ir.Value", spec: AttentionBwdSpec, lse: "ir.Value",
                  shifted_bias: "ir.Value | None" = None) -> tuple["ir.Value", float]:
    """(value, factor): value * factor is what fmha.masked_score takes and exp2_argument turns into the
    exponent of P: (dot, scale log2 e) in the fast form; else (core - lse, log2 e), or core +
    `shifted_bias` (ScoreBias.shifted: bias - lse) with a bias. `lse` is lse_operand's value."""
    if not natural_units(spec):
        return dot, spec.scale * LOG2_E
    core = (arith.mulf(_tanh(dot, spec), _constant(spec.softcap, dot)) if spec.softcap
            else arith.mulf(dot, _constant(spec.scale, dot)))
    return (arith.subf(core, lse) if shifted_bias is None else arith.addf(core, shifted_bias)), LOG2_E


def lse_operand(lse: "ir.Value", spec: AttentionBwdSpec) -> "ir.Value":
    """The row's lse as the exponent takes it: lse log2 e in the fast form, lse itself in natural units."""
    return lse if natural_units(spec) else arith.mulf(lse, _constant(LOG2_E, lse))


def exp2_argument(score: "ir.Value", lse: "ir.Value", spec: AttentionBwdSpec, fastmath=None) -> "ir.Value":
    """The exponent of P from the (masked) score: score - lse log2 e in the fast form (`fastmath` lets it
    fuse with the scale into one fma); in natural units the score already is it."""
    if not natural_units(spec):
        return arith.subf(score, lse, fastmath=fastmath)
    return score


def masked_lse(lse: "ir.Value", spec: AttentionBwdSpec) -> "ir.Value":
    """lse_operand's value for masked scores: a row that sees no key may come with lse = -inf (what
    torch.logsumexp and FlexAttention return) as well as +inf, and the fast form's hidden scores give
    exp2(-inf - lse), which is NaN for -inf: -inf is read as +inf, so those P are 0. In natural units the
    masked score already is the exponent (-inf where hidden), whatever the lse."""
    if natural_units(spec):
        return lse
    minus_inf = arith.cmpf(arith.CmpFPredicate.OEQ, lse, _constant(float("-inf"), lse))
    return arith.select(minus_inf, _constant(float("inf"), lse), lse)


class ScoreBias:
    """The bias of one (batch, query head)'s scores; built once per head by `of`."""

    has_slope_grad = False

    @staticmethod
    def of(spec: AttentionBwdSpec, operands: dict, batch, head, heads_q, seqlen_q, seqlen_k) -> "ScoreBias | None":
        """The bias of `spec` for (batch, head) (index values), or None without one. `operands`: the
        dq_dk_dv op's operands by name (bias, dbias_out, alibi_slopes, dalibi_slopes_out)."""
        if spec.bias == "elementwise":
            return ElementwiseBias(operands, batch, head, seqlen_q, seqlen_k, spec.deterministic)
        if spec.bias == "alibi":
            return Alibi(operands, batch, head, heads_q, seqlen_q, seqlen_k)
        return None

    def __init__(self, seqlen_q, seqlen_k):
        self.seqlen_q, self.seqlen_k = seqlen_q, seqlen_k

    def shifted(self, q_pos, k_pos, like: "ir.Value", lse: "ir.Value") -> "ir.Value":
        """What the bias adds at (q_pos, k_pos) (index or vector<N x index>) minus `lse` (the row's,
        shaped like `like`, f32): one rounding, at the size of the difference."""
        raise NotImplementedError

    def grad(self, ds: "ir.Value", q_pos, k_pos) -> "ir.Value | None":
        """Take dS at these positions: dbias adds it (f32 atomics); the slopes return dS * -|distance|
        (zero where not `inside`) for the body to sum into add_slope_grad; None when nothing is asked."""
        return None

    def inside(self, q_pos, k_pos, shape: list[int]) -> "ir.Value":
        """i1 (or vector<N x i1>): the position is inside both sequences."""
        q_pos, k_pos, seqlen_q, seqlen_k = (splat(v, shape) for v in (q_pos, k_pos, self.seqlen_q, self.seqlen_k))
        return arith.andi(arith.cmpi(arith.CmpIPredicate.slt, q_pos, seqlen_q),
                          arith.cmpi(arith.CmpIPredicate.slt, k_pos, seqlen_k))


def _broadcast_index(position: "ir.Value", buffer: "ir.Value", dim: int) -> "ir.Value":
    """position in a dim of `buffer` that is the problem's size or 1 (broadcast): min(position, size - 1)."""
    return arith.minui(position, arith.subi(memref.dim(buffer, index(dim)), index(1)))


class ElementwiseBias(ScoreBias):
    def __init__(self, operands, batch, head, seqlen_q, seqlen_k, deterministic=False):
        super().__init__(seqlen_q, seqlen_k)
        self.bias, self.dbias = operands["bias"], operands.get("dbias_out")
        self.prefix = [_broadcast_index(batch, self.bias, 0), _broadcast_index(head, self.bias, 1)]
        # Deterministic: dbias_out is [B, Hq, Sq, Sk], one partial per (batch, head), each element
        # stored once (one work-group owns a key, one lane a (query, key)); the convert sums the
        # broadcast dims in order.
        self.deterministic = deterministic
        self.grad_prefix = [batch, head] if deterministic else self.prefix

    def shifted(self, q_pos, k_pos, like, lse):
        shape = vector_shape(like.type)
        last_q, last_k = arith.subi(self.seqlen_q, index(1)), arith.subi(self.seqlen_k, index(1))
        q_pos, k_pos = splat(q_pos, shape), splat(k_pos, shape)
        inside = self.inside(q_pos, k_pos, shape)
        values = []
        for q, k, ok in scalar_elements(shape, q_pos, k_pos, inside):
            loaded = memref.load(self.bias, self.prefix + [arith.minui(q, last_q), arith.minui(k, last_k)])
            values.append(arith.select(ok, to_f32(loaded), f32(0.0)))
        return arith.subf(values[0] if not shape else vector.from_elements(like.type, values), lse)

    def grad(self, ds, q_pos, k_pos):
        if self.dbias is None:
            return None
        shape = vector_shape(ds.type)
        q_pos, k_pos = splat(q_pos, shape), splat(k_pos, shape)
        for value, q, k, ok in scalar_elements(shape, ds, q_pos, k_pos, self.inside(q_pos, k_pos, shape)):
            guard = scf.IfOp(ok)
            with ir.InsertionPoint(guard.then_block):
                accumulate(value, self.dbias, self.grad_prefix + [q, k], stored=self.deterministic)
                scf.yield_([])
        return None


class Alibi(ScoreBias):
    def __init__(self, operands, batch, head, heads_q, seqlen_q, seqlen_k):
        super().__init__(seqlen_q, seqlen_k)
        slopes = operands.get("alibi_slopes")
        self.dslopes = operands.get("dalibi_slopes_out")
        self.has_slope_grad = self.dslopes is not None
        if slopes is None:
            self.slope = _standard_slope(head, heads_q)
        else:
            self.at = [_broadcast_index(batch, slopes, 0), head]
            self.slope = memref.load(slopes, self.at)

    def shifted(self, q_pos, k_pos, like, lse):
        """fma(distance, -slope, -lse): the product is never rounded at its own size."""
        minus = splat(arith.negf(self.slope), vector_shape(like.type))
        return _fma(self._distance(q_pos, k_pos, like), minus, arith.negf(lse))

    def grad(self, ds, q_pos, k_pos):
        if self.dslopes is None:
            return None
        shape = vector_shape(ds.type)
        weighted = arith.mulf(ds, arith.negf(self._distance(q_pos, k_pos, ds)))
        return arith.select(self.inside(q_pos, k_pos, shape), weighted, _constant(0.0, ds))

    def add_slope_grad(self, total: "ir.Value") -> None:
        """d(slopes)[b', h] += total (an f32 the caller has summed; one lane calls this)."""
        fmha.AtomicAddOp.build(total, self.dslopes, self.at)

    def _distance(self, q_pos, k_pos, like):
        """|q + Sk - Sq - k| as f32, shaped like `like`."""
        shape = vector_shape(like.type)
        q_pos, k_pos, seqlen_q, seqlen_k = (splat(v, shape) for v in (q_pos, k_pos, self.seqlen_q, self.seqlen_k))
        distance = arith.subi(arith.addi(q_pos, arith.subi(seqlen_k, seqlen_q)), k_pos)
        distance = arith.maxsi(distance, arith.subi(splat(index(0), shape), distance))
        i32 = ir.IntegerType.get_signless(32)
        as_i32 = arith.index_cast(ir.VectorType.get(shape, i32) if shape else i32, distance)
        return arith.sitofp(like.type, as_i32)


def _standard_slope(head: "ir.Value", heads: "ir.Value") -> "ir.Value":
    """2^(-8 (head + 1) / heads) (f32) for query head `head` of `heads` (index values)."""
    h = arith.sitofp(ir.F32Type.get(), arith.index_cast(ir.IntegerType.get_signless(32), arith.addi(head, index(1))))
    n = arith.sitofp(ir.F32Type.get(), arith.index_cast(ir.IntegerType.get_signless(32), heads))
    return fmha.Exp2Op.build(arith.divf(arith.mulf(h, f32(-8.0)), n))


def softcap_grad(ds: "ir.Value", dot: "ir.Value", spec: AttentionBwdSpec) -> "ir.Value":
    """dS times 1 - tanh^2(scale dot / c) (dS itself without softcap)."""
    if not spec.softcap:
        return ds
    return arith.mulf(ds, _tanh(dot, spec, slope=True)[1])


# f32's tanh below TANH_SERIES_BELOW: y + y^3 p(y^2), p of degree 4 fitted here to tanh's relative error
# (weighted least squares, iterated toward minimax): 0.76 f32 ulps at most over |y| < 0.625.
TANH_SERIES_BELOW = 0.625
TANH_SERIES = (-0.33333284, 0.13331491, -0.0537435, 0.02065058, -0.00571704)


def _tanh(dot: "ir.Value", spec: AttentionBwdSpec, slope: bool = False):
    """tanh(y), y = scale dot / c; with `slope`, (tanh, 1 - tanh^2).

    The exponential form 1 - 2 / (2^(2 y log2 e) + 1) (2^... = inf saturates it to 1) cancels near 0:
    r = 2 / (...) ~ 1 carries an absolute error of an ulp of 1, ~100-200 f32 ulps of t at |y| ~ 0.03-0.14
    (scores 1-4 at a cap of 30). In f32 that is the kernel's largest error, and the gate's exact reference
    fails it (2.3-3.5x the bound in the interpreter's f32 matrix at cap 30). So f32 takes, below
    TANH_SERIES_BELOW, the odd series, and above it the exponential form of |y| (r <= 0.46: an ulp or two
    of t) with the sign restored, an IEEE division, and 1 - t^2 as r (2 - r) (no cancellation near
    |t| = 1): ~2.8 f32 ulps at most with ex2.approx's error (NumPy sweep, reports/bench_notes.md).
    Both forms are computed and one selected: no divergence in a wave. f16 / bf16 keep the exponential
    form with the approximate reciprocal (div.approx.f32 / v_rcp_f32; IEEE division cost the softcap 31%
    of the time on the H200, this 13%): its error is far below their P and dS rounding and they pass the
    same gate, while the f32 form would take the softcap from ~10 to ~28 PTX instructions per score
    (bench_notes.md, softcap v1-v4)."""
    accurate = spec.dtype == "f32"
    x = arith.mulf(dot, _constant(2 * spec.scale * LOG2_E / spec.softcap, dot))
    if accurate:
        # |x| by a select on the sign of `dot` (NVVM has no legal fabs outside libdevice)
        negative = arith.cmpf(arith.CmpFPredicate.OLT, dot, _constant(0.0, dot))
        x = arith.select(negative, arith.negf(x), x)
    one = _constant(1.0, dot)
    fast = None if accurate else ir.Attribute.parse("#arith.fastmath<afn>")
    r = arith.divf(_constant(2.0, dot), arith.addf(fmha.Exp2Op.build(x), one), fastmath=fast)
    t = arith.subf(one, r)
    if not accurate:
        return (t, arith.subf(one, arith.mulf(t, t))) if slope else t

    y = arith.mulf(dot, _constant(spec.scale / spec.softcap, dot))
    z = arith.mulf(y, y)
    p = _constant(TANH_SERIES[-1], dot)
    for coefficient in reversed(TANH_SERIES[:-1]):
        p = _fma(p, z, _constant(coefficient, dot))
    series = _fma(arith.mulf(y, z), p, y)
    small = arith.cmpf(arith.CmpFPredicate.OLT, x, _constant(2 * LOG2_E * TANH_SERIES_BELOW, dot))
    t = arith.select(small, series, arith.select(negative, arith.subf(r, one), t))
    if not slope:
        return t
    return t, arith.select(small, arith.subf(one, arith.mulf(series, series)),
                           arith.mulf(r, arith.subf(_constant(2.0, dot), r)))


def _fma(a: "ir.Value", b: "ir.Value", c: "ir.Value") -> "ir.Value":
    """a * b + c rounded once (llvm.intr.fma: every backend keeps it, the interpreter models it)."""
    return create_op("llvm.intr.fma", a.type, [a, b, c])


def _constant(value: float, like: "ir.Value") -> "ir.Value":
    return splat(f32(value), vector_shape(like.type))
