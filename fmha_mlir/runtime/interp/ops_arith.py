"""arith, math, ub and the scalar llvm/rocdl math ops: element-wise NumPy calls over all lanes.

Integers wrap as in MLIR (NumPy fixed-width arithmetic); i1 is bool; index is int64. Float results of
bf16 type are rounded to bf16 (nearest even) after every op. fma is computed in float64 and rounded
once to the result type (exact for f32 products, so only a rare double rounding differs from a fused
multiply-add). The targets' approximate math (ex2.approx.f32, rocdl.exp2, arith.divf with `afn`) is
given the hardware's error bound, a whole number of ulps fixed by the inputs (`approximate`): exact
results there would let a kernel pass in CI that relies on accuracy the hardware does not have.
fmha.exp2 and math.exp2, not yet bound to a target, are exact.
"""
from __future__ import annotations

import numpy as np

from ...dtypes import bf16_bits, bf16_value
from .compiler import KernelCompiler
from .errors import InterpreterError
from .parser import Dense, Number, Operation, typed_scalar
from .types import ScalarType, element_type, vector_rank
from .values import as_type, finisher, lane_mask_for, zeros_of


def elementwise(fn, finish: bool = True):
    """A handler for an op whose single result is fn(*operands), applied to all lanes."""

    def compile_op(op: Operation, cc: KernelCompiler):
        ins = cc.operands(op)
        out = cc.result(op)
        fin = finisher(op.result_types[0]) if finish and element_type(op.result_types[0]).name == "bf16" \
            else None
        if len(ins) == 1:
            (a,) = ins
            if fin is None:
                def run(st, mask):
                    st.env[out] = fn(st.env[a])
            else:
                def run(st, mask):
                    st.env[out] = fin(fn(st.env[a]))
        elif len(ins) == 2:
            a, b = ins
            if fin is None:
                def run(st, mask):
                    env = st.env
                    env[out] = fn(env[a], env[b])
            else:
                def run(st, mask):
                    env = st.env
                    env[out] = fin(fn(env[a], env[b]))
        else:
            def run(st, mask):
                env = st.env
                value = fn(*[env[i] for i in ins])
                env[out] = fin(value) if fin else value
        return run

    return compile_op


def typed(factory):
    """A handler whose NumPy function depends on the op's types: factory(op, cc) -> fn (which brings
    its result to the result type itself)."""

    def compile_op(op: Operation, cc: KernelCompiler):
        fn = factory(op, cc)
        return elementwise(fn, finish=False)(op, cc)

    return compile_op


# --- integers --------------------------------------------------------------------------------------

def _unsigned(t):
    return element_type(t).unsigned_dtype


def _unsigned_binary(np_fn):
    def factory(op, cc):
        u, s = _unsigned(op.operand_types[0]), element_type(op.result_types[0]).dtype
        return lambda a, b: np_fn(np.asarray(a).astype(u), np.asarray(b).astype(u)).astype(s)
    return typed(factory)


def _checked_division(kind: str):
    """Integer division/remainder; a zero divisor in an executing lane is an error (UB in MLIR)."""

    def compile_op(op: Operation, cc: KernelCompiler):
        a, b = cc.operands(op)
        out = cc.result(op)
        t = element_type(op.result_types[0])
        u = t.unsigned_dtype
        what = cc.describe(op)

        def run(st, mask):
            x, y = st.env[a], st.env[b]
            zero = (y == 0) if mask is None else (np.broadcast_to(y == 0, mask.shape) & mask)
            if np.any(zero):
                raise InterpreterError(f"{what}: division by zero")
            y = np.where(y == 0, 1, y).astype(t.dtype)
            st.env[out] = _divide(kind, x, y, u).astype(t.dtype)

        return run

    return compile_op


def _divide(kind, x, y, u):
    if kind == "divsi":
        q = x // y
        return q + (((x % y) != 0) & ((x < 0) ^ (y < 0)))
    if kind == "remsi":
        return np.fmod(x, y)
    if kind == "floordivsi":
        return x // y
    if kind == "ceildivsi":
        return -((-x) // y)
    xu, yu = np.asarray(x).astype(u), np.asarray(y).astype(u)
    if kind == "divui":
        return xu // yu
    if kind == "remui":
        return xu % yu
    if kind == "ceildivui":
        return xu // yu + (xu % yu != 0)
    raise AssertionError(kind)


CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater, 5: np.greater_equal,
        6: "ult", 7: "ule", 8: "ugt", 9: "uge"}
_UNSIGNED_CMP = {"ult": np.less, "ule": np.less_equal, "ugt": np.greater, "uge": np.greater_equal}


def _cmpi(op, cc):
    pred = CMPI.get(cc.int_attr(op, "predicate"))
    if pred is None:
        raise cc.error(op, f"unknown cmpi predicate {cc.int_attr(op, 'predicate')}")
    if isinstance(pred, str):
        u, fn = _unsigned(op.operand_types[0]), _UNSIGNED_CMP[pred]
        return lambda a, b: fn(np.asarray(a).astype(u), np.asarray(b).astype(u))
    return pred


def _unordered(a, b):
    return np.isnan(a) | np.isnan(b)


CMPF = {
    0: lambda a, b: np.zeros(np.broadcast(a, b).shape, dtype=bool),
    1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal,
    6: lambda a, b: np.not_equal(a, b) & ~_unordered(a, b),
    7: lambda a, b: ~_unordered(a, b),
    8: lambda a, b: np.equal(a, b) | _unordered(a, b),
    9: lambda a, b: ~np.less_equal(a, b), 10: lambda a, b: ~np.less(a, b),
    11: lambda a, b: ~np.greater_equal(a, b), 12: lambda a, b: ~np.greater(a, b),
    13: np.not_equal, 14: _unordered,
    15: lambda a, b: np.ones(np.broadcast(a, b).shape, dtype=bool),
}


def _cmpf(op, cc):
    pred = CMPF.get(cc.int_attr(op, "predicate"))
    if pred is None:
        raise cc.error(op, f"unknown cmpf predicate {cc.int_attr(op, 'predicate')}")
    return pred


# --- casts -----------------------------------------------------------------------------------------

def _cast(kind):
    def factory(op, cc):
        src, dst = element_type(op.operand_types[0]), element_type(op.result_types[0])
        fin = finisher(op.result_types[0])
        if kind in ("extsi", "index_cast") and src.bits == 1:
            return lambda x: np.where(x, -1, 0).astype(dst.dtype)
        if kind in ("trunci", "index_cast") and dst.bits == 1:
            return lambda x: (np.asarray(x) & 1).astype(bool)
        if kind in ("extsi", "trunci", "index_cast", "fptosi"):
            return lambda x: np.asarray(x).astype(dst.dtype)
        if kind in ("extui", "index_castui"):
            if src.bits >= dst.bits:  # a truncation
                return lambda x: np.asarray(x).astype(dst.dtype)
            return lambda x: np.asarray(x).astype(src.unsigned_dtype).astype(dst.dtype)
        if kind == "fptoui":
            return lambda x: np.asarray(x).astype(dst.unsigned_dtype).astype(dst.dtype)
        if kind == "uitofp":
            return lambda x: fin(np.asarray(x).astype(src.unsigned_dtype).astype(np.float64))
        if kind == "sitofp":
            return lambda x: fin(np.asarray(x).astype(np.float64))
        if kind in ("extf", "truncf"):
            return fin
        raise AssertionError(kind)
    return typed(factory)


def _bitcast(op, cc):
    src, dst = element_type(op.operand_types[0]), element_type(op.result_types[0])
    if src.bits != dst.bits:
        raise cc.error(op, f"bitcast between {src} and {dst} of different widths")

    def to_bits(x):
        x = np.asarray(x)
        return bf16_bits(x) if src.name == "bf16" else x.astype(src.storage_dtype, copy=False)

    def from_bits(raw):
        value = raw.view(dst.storage_dtype)
        return bf16_value(value).reshape(value.shape) if dst.name == "bf16" else value

    return lambda x: from_bits(np.ascontiguousarray(to_bits(x)))


# --- floats ----------------------------------------------------------------------------------------

def fma(a, b, c):
    """a*b+c rounded once from float64 (exact products for f32/f16/bf16 inputs)."""
    dtype = np.result_type(a, b, c)
    return (np.asarray(a, np.float64) * b + np.asarray(c, np.float64)).astype(dtype)


def _rsqrt(x):
    return (1 / np.sqrt(x)).astype(np.asarray(x).dtype)


def flush_subnormals(x):
    """Flush-to-zero (the .ftz of NVIDIA's approximate math): subnormals become signed zeros."""
    tiny = np.finfo(np.asarray(x).dtype).tiny
    return np.where(np.abs(x) < tiny, np.copysign(np.zeros_like(x), x), x)   # (x * 0 warns on inf)


# The hardware's approximate math, as whole f32 ulps off the correctly rounded result: MUFU.EX2
# (ex2.approx.f32) is within 2 ulps (2.05 measured on the H200, reports/exp2_error.md), v_exp_f32
# and v_rcp_f32 within 1, div.approx.f32 within 2. An `afn` division becomes div.approx.f32 on sm_90 and
# v_rcp_f32 times the numerator on AMD: the kernel IR does not name its target, so it gets the wider bound.
EX2_APPROX_ULPS = 2
AMD_EXP2_ULPS = 1
AFN_DIVISION_ULPS = 2


def approximate(exact, ulps: int, *inputs):
    """`exact` (f32, correctly rounded) moved by k ulps, k in [-ulps, ulps] a fixed function of the
    inputs' bits: the same input gives the same error, as on the hardware, and the errors over a tensor
    spread across the bound, so a kernel that needs the exact value fails in the interpreter too. Zeros,
    infinities and NaN stay as they are (the hardware's special cases are exact); other dtypes too."""
    exact = np.asarray(exact)
    if exact.dtype != np.float32:
        return exact[()]
    shape = exact.shape
    exact = exact.reshape(-1)   # at least one dimension: uint32 products of arrays wrap without a warning
    mixed = np.zeros(exact.shape, np.uint32)
    for value in inputs:
        bits = np.broadcast_to(np.asarray(value, np.float32), shape).reshape(-1).view(np.uint32)
        mixed = (mixed ^ bits) * np.uint32(0x9E3779B1)
    # murmur3's finalizer: every input bit reaches the low bits k is taken from
    mixed ^= mixed >> np.uint32(16)
    mixed *= np.uint32(0x85EBCA6B)
    mixed ^= mixed >> np.uint32(13)
    mixed *= np.uint32(0xC2B2AE35)
    mixed ^= mixed >> np.uint32(16)
    k = (mixed % np.uint32(2 * ulps + 1)).astype(np.int32) - np.int32(ulps)
    # Adding k to the bit pattern of a normal number steps k ulps away from or toward zero, across
    # binades too; subnormals stay exact (ex2.approx.ftz flushes them).
    moved = (exact.view(np.int32) + k).view(np.float32)
    normal = np.isfinite(exact) & (np.abs(exact) >= np.finfo(np.float32).tiny)
    return np.where(normal, moved, exact).reshape(shape)[()]


def _approximate_exp2(x, ulps: int):
    """2^x within `ulps`; exact at integer x (the hardware scales its 2^fraction by 2^integer, and
    2^0 = 1 is exact, so a row's only key gets P = 1)."""
    x = np.asarray(x)
    exact = np.exp2(x)
    return np.where(x == np.floor(x), exact, approximate(exact, ulps, x))[()]


def ex2_approx(x):
    return _approximate_exp2(x, EX2_APPROX_ULPS)


def ex2_approx_ftz(x):
    return flush_subnormals(ex2_approx(flush_subnormals(x)))


def amd_exp2(x):
    return _approximate_exp2(x, AMD_EXP2_ULPS)


def _divf(op: Operation, cc: KernelCompiler):
    """IEEE division, or with fastmath `afn` (or `fast`) the hardware's approximate one."""
    text = getattr(op.attributes.get("fastmath"), "text", "")
    flags = {flag.strip() for flag in text[text.find("<") + 1:].rstrip(">").split(",")}
    if flags.isdisjoint({"afn", "fast"}):
        return elementwise(np.divide)(op, cc)
    return elementwise(lambda a, b: approximate(np.divide(a, b), AFN_DIVISION_ULPS, a, b))(op, cc)


def _select(op, cc):
    cond_rank = vector_rank(op.operand_types[0])
    vrank = vector_rank(op.result_types[0])
    if cond_rank:
        return np.where
    return lambda c, a, b: np.where(lane_mask_for(c, vrank), a, b)


def _constant(op: Operation, cc: KernelCompiler):
    out = cc.result(op)
    attr = cc.attr(op, "value")
    t = op.result_types[0]
    if isinstance(attr, Dense):
        value = as_type(attr.values, t)
    elif isinstance(attr, (Number, bool)) and isinstance(t, ScalarType):
        value = typed_scalar(getattr(attr, "value", attr), t)
    else:
        raise cc.error(op, f"constant {attr!r} of type {t} is not supported")

    def run(st, mask):
        st.env[out] = value

    return run


def _poison(op: Operation, cc: KernelCompiler):
    """ub.poison: any value will do; zeros keep results reproducible."""
    out = cc.result(op)
    value = zeros_of(op.result_types[0])

    def run(st, mask):
        st.env[out] = value

    return run


def _call_intrinsic(op: Operation, cc: KernelCompiler):
    name = cc.attr(op, "intrin")
    fn = INTRINSICS.get(name)
    if fn is None:
        raise cc.error(op, f"intrinsic {name!r} is not supported (known: {', '.join(sorted(INTRINSICS))})")
    return elementwise(fn)(op, cc)


INTRINSICS = {
    "llvm.nvvm.ex2.approx.ftz.f32": ex2_approx_ftz,
    "llvm.nvvm.ex2.approx.f32": ex2_approx,
    "llvm.exp2.f32": np.exp2,
    "llvm.maxnum.f32": np.fmax,
    "llvm.minnum.f32": np.fmin,
    "llvm.fma.f32": fma,
}

_INT_BINARY = {"addi": np.add, "subi": np.subtract, "muli": np.multiply, "andi": np.bitwise_and,
               "ori": np.bitwise_or, "xori": np.bitwise_xor, "maxsi": np.maximum, "minsi": np.minimum,
               "shli": np.left_shift, "shrsi": np.right_shift}
_FLOAT_BINARY = {"addf": np.add, "subf": np.subtract, "mulf": np.multiply,
                 "remf": np.fmod, "maximumf": np.maximum, "minimumf": np.minimum, "maxnumf": np.fmax,
                 "minnumf": np.fmin}
_MATH_UNARY = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
               "rsqrt": _rsqrt, "absf": np.abs, "absi": np.abs, "tanh": np.tanh, "floor": np.floor,
               "ceil": np.ceil, "sin": np.sin, "cos": np.cos}

HANDLERS = {
    **{f"arith.{name}": elementwise(fn) for name, fn in {**_INT_BINARY, **_FLOAT_BINARY}.items()},
    "arith.negf": elementwise(np.negative),
    "arith.divf": _divf,
    "arith.maxui": _unsigned_binary(np.maximum),
    "arith.minui": _unsigned_binary(np.minimum),
    "arith.shrui": _unsigned_binary(np.right_shift),
    **{f"arith.{k}": _checked_division(k) for k in
       ("divsi", "remsi", "floordivsi", "ceildivsi", "divui", "remui", "ceildivui")},
    "arith.cmpi": typed(_cmpi),
    "arith.cmpf": typed(_cmpf),
    "arith.select": typed(_select),
    "arith.bitcast": typed(_bitcast),
    **{f"arith.{k}": _cast(k) for k in ("extsi", "extui", "trunci", "index_cast", "index_castui",
                                        "sitofp", "uitofp", "fptosi", "fptoui", "extf", "truncf")},
    "arith.constant": _constant,
    "ub.poison": _poison,
    **{f"math.{name}": elementwise(fn) for name, fn in _MATH_UNARY.items()},
    "math.fma": elementwise(fma),
    "rocdl.exp2": elementwise(amd_exp2),
    "llvm.call_intrinsic": _call_intrinsic,
    "llvm.intr.maxnum": elementwise(np.fmax),
    "llvm.intr.minnum": elementwise(np.fmin),
    "llvm.intr.fma": elementwise(fma),
    "llvm.intr.exp2": elementwise(np.exp2),
}
