"""vector ops that do not touch memory: extract, insert, broadcast, splat, from_elements, reduction,
fma, shape_cast. A vector value is [lanes, *shape] (or [*shape] when uniform)."""
from __future__ import annotations

import numpy as np

from .compiler import KernelCompiler
from .errors import InterpreterError
from .ops_arith import fma
from .ops_memory import DYNAMIC
from .parser import Operation
from .types import VectorType, element_type, vector_rank
from .values import finisher, has_lanes, to_lanes


def _positions(op: Operation, cc: KernelCompiler, dynamic_slots: list[int]):
    slots = iter(dynamic_slots)
    return [("slot", next(slots)) if p == DYNAMIC else ("int", int(p)) for p in cc.attr(op, "static_position")]


def _index(env, positions, lanes: int, x_has_lanes: bool, what: str):
    """An index tuple for a value with or without a lane axis; per-lane positions gather per lane."""
    pos = [env[v] if kind == "slot" else v for kind, v in positions]
    if all(np.ndim(p) == 0 for p in pos):
        lead = (slice(None),) if x_has_lanes else ()
        return lead + tuple(int(p) for p in pos), False
    if not x_has_lanes:
        raise InterpreterError(f"{what}: internal: per-lane position on a uniform vector")
    return (np.arange(lanes),) + tuple(np.broadcast_to(p, (lanes,)) for p in pos), True


def compile_extract(op: Operation, cc: KernelCompiler):
    src, *dyn = cc.operands(op)
    positions = _positions(op, cc, dyn)
    vrank = vector_rank(op.operand_types[0])
    out = cc.result(op)
    what = cc.describe(op)
    per_lane_pos = any(kind == "slot" for kind, _ in positions)

    def run(st, mask):
        env = st.env
        x = env[src]
        lanes = st.grid.lanes
        if per_lane_pos and not has_lanes(x, vrank):
            x = to_lanes(x, lanes, vrank)
        index, _ = _index(env, positions, lanes, has_lanes(x, vrank), what)
        env[out] = x[index]

    return run


def compile_insert(op: Operation, cc: KernelCompiler):
    value, dest, *dyn = cc.operands(op)
    positions = _positions(op, cc, dyn)
    vrank = vector_rank(op.result_types[0])
    value_rank = vector_rank(op.operand_types[0])
    out = cc.result(op)
    what = cc.describe(op)
    per_lane_pos = any(kind == "slot" for kind, _ in positions)

    def run(st, mask):
        env = st.env
        v, d = env[value], env[dest]
        lanes = st.grid.lanes
        need_lanes = has_lanes(d, vrank) or has_lanes(v, value_rank) or per_lane_pos
        result = np.array(to_lanes(d, lanes, vrank) if need_lanes else d)
        index, _ = _index(env, positions, lanes, need_lanes, what)
        result[index] = v
        env[out] = result

    return run


def compile_broadcast(op: Operation, cc: KernelCompiler):
    (src,) = cc.operands(op)
    out = cc.result(op)
    shape = op.result_types[0].shape
    src_rank = vector_rank(op.operand_types[0])
    if not isinstance(op.result_types[0], VectorType):
        raise cc.error(op, "broadcast to a scalar is not supported")
    pad = (1,) * (len(shape) - src_rank)

    def run(st, mask):
        x = st.env[src]
        if has_lanes(x, src_rank):
            x = np.asarray(x)
            st.env[out] = np.broadcast_to(x.reshape(x.shape[:1] + pad + x.shape[1:]), x.shape[:1] + shape)
        else:
            st.env[out] = np.broadcast_to(x, shape)

    return run


def compile_from_elements(op: Operation, cc: KernelCompiler):
    ins = cc.operands(op)
    out = cc.result(op)
    t = op.result_types[0]
    dtype = element_type(t).dtype

    def run(st, mask):
        elements = [st.env[i] for i in ins]
        if any(np.ndim(e) for e in elements):
            lanes = st.grid.lanes
            stacked = np.stack([np.broadcast_to(e, (lanes,)) for e in elements], axis=-1)
            st.env[out] = stacked.reshape((lanes,) + t.shape).astype(dtype, copy=False)
        else:
            st.env[out] = np.array(elements, dtype=dtype).reshape(t.shape)

    return run


_REDUCTIONS = {"add": np.add, "mul": np.multiply, "maxnumf": np.fmax, "minnumf": np.fmin,
               "maximumf": np.maximum, "minimumf": np.minimum, "maxsi": np.maximum, "minsi": np.minimum,
               "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


def compile_reduction(op: Operation, cc: KernelCompiler):
    """Elements combined in order (acc, v0, v1, ...), as LLVM's ordered reductions do."""
    src, *acc = cc.operands(op)
    out = cc.result(op)
    kind = cc.attr(op, "kind").keyword
    combine = _REDUCTIONS.get(kind)
    if combine is None:
        raise cc.error(op, f"reduction kind {kind!r} is not supported")
    if vector_rank(op.operand_types[0]) != 1:
        raise cc.error(op, "only 1-D vector reductions are supported")
    fin = finisher(op.result_types[0])
    n = op.operand_types[0].shape[0]

    def run(st, mask):
        v = st.env[src]
        result = st.env[acc[0]] if acc else v[..., 0]
        for i in range(0 if acc else 1, n):
            result = fin(combine(result, v[..., i]))
        st.env[out] = fin(result)

    return run


def compile_fma(op: Operation, cc: KernelCompiler):
    a, b, c = cc.operands(op)
    out = cc.result(op)
    fin = finisher(op.result_types[0])

    def run(st, mask):
        env = st.env
        env[out] = fin(fma(env[a], env[b], env[c]))

    return run


def compile_shape_cast(op: Operation, cc: KernelCompiler):
    (src,) = cc.operands(op)
    out = cc.result(op)
    shape = op.result_types[0].shape
    src_rank = vector_rank(op.operand_types[0])

    def run(st, mask):
        x = np.asarray(st.env[src])
        lead = x.shape[:1] if has_lanes(x, src_rank) else ()
        st.env[out] = x.reshape(lead + shape)

    return run


HANDLERS = {
    "vector.extract": compile_extract,
    "vector.insert": compile_insert,
    "vector.broadcast": compile_broadcast,
    "vector.splat": compile_broadcast,
    "vector.from_elements": compile_from_elements,
    "vector.reduction": compile_reduction,
    "vector.fma": compile_fma,
    "vector.shape_cast": compile_shape_cast,
}
