"""Small IR-building helpers shared by the fmha lowering passes.

Every helper builds at the current insertion point and location (callers open
`ir.InsertionPoint` / `ir.Location` contexts), so the passes read like the IR they emit.
"""
from __future__ import annotations

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, gpu, ir, memref, scf, vector


def collect_ops(root: "ir.Operation", names) -> list["ir.Operation"]:
    """Every op under `root` (itself excluded) whose name is in `names`, in pre-order.

    Collected up front so callers can rewrite them without disturbing the walk.
    """
    names = frozenset(names)
    found: list[ir.Operation] = []

    def visit(op):
        if op.name in names and op != root:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def enclosing_op(op: "ir.Operation", name: str):
    """The nearest ancestor of `op` named `name`, or None."""
    parent = op.parent
    while parent is not None:
        if parent.name == name:
            return parent
        parent = parent.parent
    return None


def index(value: int) -> "ir.Value":
    return arith.constant(ir.IndexType.get(), value)


def i32(value: int) -> "ir.Value":
    return arith.constant(ir.IntegerType.get_signless(32), value)


def wave_uniform(value: "ir.Value", wave: int) -> "ir.Value":
    """An index every lane of a wave holds alike (a warp or warpgroup id), read from lane 0 by a shuffle, which
    ptxas knows to be uniform: what is built from it (descriptors, tile offsets) can live in uniform registers."""
    i32t = ir.IntegerType.get_signless(32)
    same, _valid = gpu.shuffle(arith.index_cast(i32t, value), i32(0), i32(wave), gpu.ShuffleMode.IDX)
    return arith.index_cast(ir.IndexType.get(), same)


def f32(value: float) -> "ir.Value":
    return arith.constant(ir.F32Type.get(), value)


def vector_shape(value_type: "ir.Type") -> list[int]:
    """The shape of a vector type, [] for a scalar."""
    return list(ir.VectorType(value_type).shape) if isinstance(value_type, ir.VectorType) else []


def splat(value: "ir.Value", shape: list[int]) -> "ir.Value":
    """`value` broadcast to vector<shape> (unchanged when shape is empty or it already is a vector)."""
    if not shape or isinstance(value.type, ir.VectorType):
        return value
    return vector.broadcast(ir.VectorType.get(shape, value.type), value)


def to_f32(value: "ir.Value") -> "ir.Value":
    """An f16 / bf16 / f32 scalar or vector as f32 (unchanged when it already is)."""
    shape = vector_shape(value.type)
    f32_type = ir.VectorType.get(shape, ir.F32Type.get()) if shape else ir.F32Type.get()
    return value if value.type == f32_type else arith.extf(f32_type, value)


def scalar_elements(shape: list[int], *values) -> list[tuple]:
    """The scalar elements of equally shaped values, element by element (scalars: the values themselves)."""
    if not shape:
        return [values]
    return [tuple(vector.extract(v, [], [e]) for v in values) for e in range(shape[0])]


def accumulate(value: "ir.Value", buffer: "ir.Value", indices: list["ir.Value"], stored: bool) -> None:
    """value into buffer[indices] (a vector: consecutive elements of the last index, starting at a
    multiple of its width): added by fmha.atomic_add where several lanes meet, or stored where this lane
    is the element's one writer (deterministic mode's partials)."""
    if not stored:
        fmha.AtomicAddOp.build(value, buffer, indices)
    elif isinstance(value.type, ir.VectorType):
        vector.store(value, buffer, indices, alignment=4 * ir.VectorType(value.type).shape[0])
    else:
        memref.store(value, buffer, indices)


# llvm.getelementptr's marker for "this index is an operand, not a constant" (LLVM::GEPOp::kDynamicIndex).
GEP_DYNAMIC_INDEX = -2 ** 31


def element_pointer(buffer: "ir.Value", indices: list["ir.Value"], address_space: int = 0) -> "ir.Value":
    """An !llvm.ptr to buffer[indices] (for instructions that need an address: inline asm, vector
    atomics): a getelementptr of the aligned pointer by the strided offset, as a pointer, not integer
    arithmetic (LLVM then keeps fewer addresses live across a loop). Before the gpu.module becomes LLVM."""
    metadata = memref.ExtractStridedMetadataOp(buffer)
    offset = metadata.offset
    for i, stride in zip(indices, metadata.strides):
        offset = arith.addi(offset, arith.muli(i, stride))
    i64 = ir.IntegerType.get_signless(64)
    pointer = ir.Type.parse("!llvm.ptr" if address_space == 0 else f"!llvm.ptr<{address_space}>")
    base = arith.index_cast(i64, memref.extract_aligned_pointer_as_index(buffer))
    start = ir.Operation.create("llvm.inttoptr", results=[pointer], operands=[base]).result
    return ir.Operation.create("llvm.getelementptr", results=[pointer], operands=[start, arith.index_cast(i64, offset)],
                               attributes={"rawConstantIndices": ir.DenseI32ArrayAttr.get([GEP_DYNAMIC_INDEX]),
                                           "elem_type": ir.TypeAttr.get(memref_type(buffer).element_type)}).result


def shared_pointer(address: "ir.Value") -> "ir.Value":
    """An !llvm.ptr<3> to the shared byte address `address` (an index: a memref's aligned pointer plus an
    offset), for the instructions that take a shared pointer (TMA reduce-adds, stmatrix)."""
    return ir.Operation.create("llvm.inttoptr", results=[ir.Type.parse("!llvm.ptr<3>")], operands=[
        arith.index_cast(ir.IntegerType.get_signless(64), address)]).result


def dims(value: "ir.Value", positions) -> list["ir.Value"]:
    """memref.dim of `value` at each of `positions`."""
    return [memref.dim(value, index(p)) for p in positions]


def memref_type(value: "ir.Value") -> "ir.MemRefType":
    return ir.MemRefType(value.type)


def create_op(name: str, result_type: "ir.Type", operands: list, attributes: dict | None = None) -> "ir.Value":
    """A one-result op of a dialect these bindings have no Python builders for (amdgpu, parts of rocdl)."""
    return ir.Operation.create(name, results=[result_type], operands=operands,
                               attributes=attributes or {}).result


def expr_value(expr, operands: dict) -> "ir.Value":
    """The index value of a fmha_mlir.shape_expr expression over named memref `operands` (and index
    scalars, for an Arg)."""
    from fmha_mlir.shape_expr import ARITH_OPS, Arg, BinOp, Dim

    if isinstance(expr, Dim):
        return memref.dim(operands[expr.buffer], index(expr.index))
    if isinstance(expr, Arg):
        return operands[expr.name]
    if isinstance(expr, BinOp):
        lhs, rhs = expr_value(expr.lhs, operands), expr_value(expr.rhs, operands)
        return getattr(arith, ARITH_OPS[expr.op].removeprefix("arith."))(lhs, rhs)
    return index(expr)


def if_then(condition: "ir.Value"):
    """An scf.if without results: `with if_then(c):` builds its then block (and its yield)."""
    op = scf.IfOp(condition)
    point = ir.InsertionPoint(op.then_block)

    class _Then:
        def __enter__(self):
            point.__enter__()

        def __exit__(self, *exc):
            scf.YieldOp([])
            point.__exit__(*exc)

    return _Then()
