"""memref and vector memory ops, and fmha.atomic_add: bounds-checked loads, stores and atomics, and the
ops that only describe memory (dim, cast, subview, reinterpret_cast, view, alloca)."""
from __future__ import annotations

import numpy as np

from .compiler import KernelCompiler
from .errors import InterpreterError
from .memory import allocate, atomic, element_indices, load, row_major, store
from .parser import Operation
from .types import MemRefType, VectorType
from .values import to_lanes

# memref.atomic_rmw's `kind` enum (arith::AtomicRMWKind), in its printed integer encoding.
ATOMIC_KINDS = ("addf", "addi", "andi", "assign", "maximumf", "maxnumf", "maxs", "maxu", "minimumf",
                "minnumf", "mins", "minu", "mulf", "muli", "ori", "xori")
DYNAMIC = -(2 ** 63)  # ShapedType::kDynamic in static_offsets / static_sizes / static_strides


def _vector_extent(op: Operation, cc: KernelCompiler, t) -> int:
    if not isinstance(t, VectorType) or len(t.shape) != 1:
        raise cc.error(op, f"only 1-D vectors can be loaded or stored (got {t})")
    return t.shape[0]


def compile_load(op: Operation, cc: KernelCompiler):
    mem, *indices = cc.operands(op)
    out = cc.result(op)
    extent = _vector_extent(op, cc, op.result_types[0]) if op.name == "vector.load" else 0
    what = cc.describe(op)

    def run(st, mask):
        env = st.env
        memref, at = env[mem], [env[i] for i in indices]
        reads = st.scheduler and st.scheduler.baton.bulk_reads
        flat = None
        if reads is not None and memref.shared is None:   # global memory another work-group's bulk ops wrote?
            flat = element_indices(memref, at, mask, st.grid, what, extent)
            lanes = st.grid.executing(mask)
            reads.read(memref.storage, flat, lanes, st.grid.first_group + st.grid.group_local[lanes], what)
        env[out] = load(memref, at, mask, st.grid, what, extent, flat)

    return run


def compile_store(op: Operation, cc: KernelCompiler):
    value, mem, *indices = cc.operands(op)
    extent = _vector_extent(op, cc, op.operand_types[0]) if op.name == "vector.store" else 0
    what = cc.describe(op)

    def run(st, mask):
        env = st.env
        store(env[mem], [env[i] for i in indices], env[value], mask, st.grid, what, extent)

    return run


def _compile_atomic(op: Operation, cc: KernelCompiler, kind: str):
    value, mem, *indices = cc.operands(op)
    outs = cc.results(op)
    want_old = bool(outs) and op.results[0] in cc.used
    what = cc.describe(op)
    if isinstance(op.operand_types[0], VectorType):
        raise cc.error(op, "vector atomics are not supported")

    def run(st, mask):
        env = st.env
        old = atomic(env[mem], [env[i] for i in indices], env[value], kind, mask, st.grid,
                     st.atomic_permutation(), want_old, what)
        if outs:
            env[outs[0]] = old

    return run


def compile_atomic_rmw(op: Operation, cc: KernelCompiler):
    code = cc.int_attr(op, "kind")
    if not 0 <= code < len(ATOMIC_KINDS):
        raise cc.error(op, f"unknown atomic kind {code}")
    return _compile_atomic(op, cc, ATOMIC_KINDS[code])


def compile_fmha_atomic_add(op: Operation, cc: KernelCompiler):
    """fmha.atomic_add; a vector<N x f32> value adds element i at the last index + i, each element its
    own atomic (as red.global.add.vN.f32 is: the elements are not one indivisible update)."""
    if not isinstance(op.operand_types[0], VectorType):
        return _compile_atomic(op, cc, "addf")
    value, mem, *indices = cc.operands(op)
    width = _vector_extent(op, cc, op.operand_types[0])
    what = cc.describe(op)

    def run(st, mask):
        env = st.env
        x = to_lanes(env[value], st.grid.lanes, 1)
        at = [env[i] for i in indices]
        for e in range(width):
            atomic(env[mem], at[:-1] + [at[-1] + e], x[:, e], "addf", mask, st.grid, st.atomic_permutation(),
                   False, what)

    return run


def compile_dim(op: Operation, cc: KernelCompiler):
    mem, index = cc.operands(op)
    out = cc.result(op)
    what = cc.describe(op)

    def run(st, mask):
        m, d = st.env[mem], st.env[index]
        if np.ndim(d) or not 0 <= int(d) < len(m.sizes):
            raise InterpreterError(f"{what}: dimension {d} out of range for rank {len(m.sizes)}")
        st.env[out] = m.sizes[int(d)]

    return run


def compile_cast(op: Operation, cc: KernelCompiler):
    """memref.cast: same memory; a static size in the target type must match the runtime size."""
    (mem,) = cc.operands(op)
    out = cc.result(op)
    target = op.result_types[0]
    what = cc.describe(op)
    if not isinstance(target, MemRefType):
        raise cc.error(op, f"cannot cast to {target}")

    def run(st, mask):
        m = st.env[mem]
        for d, (size, want) in enumerate(zip(m.sizes, target.shape)):
            if want is not None and np.any(size != want):
                raise InterpreterError(f"{what}: dimension {d} has size {size}, the cast requires {want}")
        st.env[out] = m

    return run


def _mixed(op: Operation, cc: KernelCompiler, static_name: str, dynamic_slots: list[int]):
    """A list mixing static ints and the slots of dynamic operands (marked DYNAMIC)."""
    slots = iter(dynamic_slots)
    return [("slot", next(slots)) if v == DYNAMIC else ("int", np.int64(v)) for v in cc.attr(op, static_name)]


def segments(op: Operation, cc: KernelCompiler) -> list[list[int]]:
    """The operand slots of an op with operandSegmentSizes, one list per segment."""
    slots = cc.operands(op)
    sizes = cc.attr(op, "operandSegmentSizes")
    out, start = [], 0
    for n in sizes:
        out.append(slots[start:start + n])
        start += n
    return out


def _resolve(env, mixed):
    return [env[v] if kind == "slot" else v for kind, v in mixed]


def compile_subview(op: Operation, cc: KernelCompiler):
    (src,), offs, sizes, strides = segments(op, cc)
    offs, sizes, strides = (_mixed(op, cc, "static_offsets", offs), _mixed(op, cc, "static_sizes", sizes),
                            _mixed(op, cc, "static_strides", strides))
    out = cc.result(op)
    keep = _kept_dims([v for k, v in sizes], op.result_types[0].rank)

    def run(st, mask):
        env = st.env
        m = env[src]
        o, n, s = _resolve(env, offs), _resolve(env, sizes), _resolve(env, strides)
        offset = m.offset + sum(oi * si for oi, si in zip(o, m.strides))
        new_strides = [si * ki for si, ki in zip(m.strides, s)]
        env[out] = m.with_layout(offset, [n[d] for d in keep], [new_strides[d] for d in keep])

    return run


def _kept_dims(sizes, rank: int) -> list[int]:
    """Rank-reducing subviews drop unit dims (leftmost first) until the result rank is reached."""
    keep, drop = [], len(sizes) - rank
    for d, n in enumerate(sizes):
        if drop and isinstance(n, np.integer) and n == 1:
            drop -= 1
        else:
            keep.append(d)
    return keep


def compile_reinterpret_cast(op: Operation, cc: KernelCompiler):
    (src,), offs, sizes, strides = segments(op, cc)
    offs, sizes, strides = (_mixed(op, cc, "static_offsets", offs), _mixed(op, cc, "static_sizes", sizes),
                            _mixed(op, cc, "static_strides", strides))
    out = cc.result(op)

    def run(st, mask):
        env = st.env
        env[out] = env[src].with_layout(_resolve(env, offs)[0], _resolve(env, sizes), _resolve(env, strides))

    return run


def compile_extract_strided_metadata(op: Operation, cc: KernelCompiler):
    """memref.extract_strided_metadata: the base (the same storage, as a rank-0 memref at offset 0),
    the offset, the sizes and the strides."""
    (src,) = cc.operands(op)
    base, offset, *rest = cc.results(op)

    def run(st, mask):
        env = st.env
        m = env[src]
        env[base] = m.with_layout(np.int64(0), (), ())
        env[offset] = m.offset
        for slot, value in zip(rest, tuple(m.sizes) + tuple(m.strides)):
            env[slot] = value

    return run


def compile_view(op: Operation, cc: KernelCompiler):
    """memref.view of workgroup memory: its bytes from a byte offset on, as a row-major memref of static
    shape and another element type; different views alias the same bytes."""
    src, shift, *sizes = cc.operands(op)
    t, src_t = op.result_types[0], op.operand_types[0]
    if sizes or any(n is None for n in t.shape) or t.strides is not None:
        raise cc.error(op, f"only views of static shape and identity layout are supported (got {t})")
    if not isinstance(src_t, MemRefType) or src_t.elem.name != "i8" or src_t.rank != 1:
        raise cc.error(op, f"the source must be a 1-D memref of i8 (got {src_t})")
    out = cc.result(op)
    itemsize = t.elem.storage_dtype.itemsize
    nbytes = int(np.prod(t.shape, dtype=np.int64)) * itemsize
    strides = row_major(t.shape)
    what = cc.describe(op)

    def run(st, mask):
        env = st.env
        m, byte = env[src], env[shift]
        g = st.grid
        if m.shared is None:
            raise InterpreterError(f"{what}: views of memory other than workgroup memory are not supported")
        start = m.offset + byte
        misaligned, outside = start % itemsize != 0, (byte < 0) | (byte + nbytes > m.sizes[0])
        for bad, problem in ((misaligned, f"is not a multiple of {itemsize}, the size of {t.elem}"),
                             (outside, f"and {nbytes} bytes of {t} do not fit in the {int(m.sizes[0])} "
                                       f"bytes of {m.shared.name}")):
            bad = np.broadcast_to(bad, (g.lanes,))
            if mask is not None:
                bad = bad & mask
            if bad.any():
                lane = int(np.argmax(bad))
                raise InterpreterError(f"{what}: {g.describe(lane)}: byte offset "
                                       f"{int(np.broadcast_to(byte, (g.lanes,))[lane])} {problem}")
        env[out] = m.shared.typed(t.elem, t.shape, strides, start)

    return run


def compile_alloca(op: Operation, cc: KernelCompiler):
    """memref.alloca: private memory, one copy per lane, fresh each time the op runs."""
    out = cc.result(op)
    t = op.result_types[0]
    what = cc.describe(op)

    def run(st, mask):
        st.env[out] = allocate(t, st.grid.lanes, st.grid.lane_index, what)

    return run


def compile_passthrough(op: Operation, cc: KernelCompiler):
    """Ops that only annotate a memref (memref.assume_alignment)."""
    ins = cc.operands(op)
    outs = cc.results(op)

    def run(st, mask):
        for slot in outs:
            st.env[slot] = st.env[ins[0]]

    return run


HANDLERS = {
    "memref.load": compile_load,
    "vector.load": compile_load,
    "memref.store": compile_store,
    "vector.store": compile_store,
    "memref.atomic_rmw": compile_atomic_rmw,
    "fmha.atomic_add": compile_fmha_atomic_add,
    "memref.dim": compile_dim,
    "memref.cast": compile_cast,
    "memref.subview": compile_subview,
    "memref.reinterpret_cast": compile_reinterpret_cast,
    "memref.extract_strided_metadata": compile_extract_strided_metadata,
    "memref.view": compile_view,
    "memref.alloca": compile_alloca,
    "memref.assume_alignment": compile_passthrough,
}
