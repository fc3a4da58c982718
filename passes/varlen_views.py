"""Varlen in the passes (fmha_mlir/varlen.py has the layout): the host's max-length scalars, the packed
operands' sides, and the per-sequence views each kernel builds before its body.

A packed [total, H, D] operand becomes, at the top of the kernel, the rank-4 view
[B, H, len_b, D] with strides [0, stride_head, stride_token, 1] and offset cu_seqlens[b] *
stride_token (lse [H, total]: [B, H, len_b], strides [0, stride_head, 1]): the body indexes it at
[b, h, s, d] as it indexes a padded tensor, and `memref.dim(view, 2)` is the sequence's own length, so
every mask, ALiBi and tail rule applies per sequence unchanged. A work-group whose first row or key
block lies past its sequence's end does nothing (its grid was sized by the max length): that also
keeps a length-0 sequence's clamped rows from reading outside the tensor.
"""
from __future__ import annotations

from fmha_mlir.dialects import fmha
from fmha_mlir.dialects.fmha_attrs import OPERAND_ATTRIBUTE
from fmha_mlir.mlir import arith, gpu, ir, memref, scf
from fmha_mlir.shape_expr import BinOp, Dim, Expr
from fmha_mlir.spec import AttentionBwdSpec
from fmha_mlir.varlen import CU_SEQLENS, MAX_SEQLENS, STAGE_SIDES, packed_expr

from .base import PassFailure
from .ir_builders import enclosing_op, index

DYNAMIC = -(2 ** 63)   # ShapedType::kDynamic in static offsets / sizes / strides
_BLOCK_DIMS = ("x", "y", "z")


def host_scalars(op: "ir.Operation") -> dict[str, "ir.Value"]:
    """The max-length arguments of the function holding `op`, by their `fmha.operand` names."""
    function = enclosing_op(op, "func.func")
    attrs = function.attributes["arg_attrs"] if function is not None and "arg_attrs" in function.attributes else None
    found = {}
    if attrs is not None:
        for i, argument in enumerate(function.regions[0].blocks[0].arguments):
            names = ir.DictAttr(attrs[i])
            if OPERAND_ATTRIBUTE in names and ir.StringAttr(names[OPERAND_ATTRIBUTE]).value in MAX_SEQLENS:
                found[ir.StringAttr(names[OPERAND_ATTRIBUTE]).value] = argument
    missing = [name for name in MAX_SEQLENS if name not in found]
    if missing:
        raise PassFailure(f"a varlen op needs the host function's index arguments {', '.join(missing)} "
                          f"(named by '{OPERAND_ATTRIBUTE}'): the max lengths size its grids and workspaces", op)
    return found


def packed_sides(operands: dict[str, "ir.Value"]) -> dict[str, str]:
    """name -> "q" | "k" of the operands that are packed (rank 3; lse rank 2): an accumulating output
    may be a padded rank-4 workspace instead."""
    rank = {"lse": 2, "dlse": 2}
    return {name: side for name, side in STAGE_SIDES.items()
            if name in operands and ir.MemRefType(operands[name].type).rank == rank.get(name, 3)}


def stage_sides(op: "ir.Operation", operands: dict[str, "ir.Value"]) -> dict[str, str]:
    """The packed operands of a stage op; a convert's `out` is on the side of its gradient."""
    if op.name == fmha.ConvertGradOp.NAME:
        return {"out": STAGE_SIDES[fmha.ConvertGradOp.grad_of(op)]}
    return packed_sides(operands)


def sized(exprs, op: "ir.Operation", spec: AttentionBwdSpec, operands: dict):
    """(expressions, operands) to build sizes from: unchanged without varlen; else over the packed
    operands, with the host's max lengths among the operands."""
    if not spec.varlen:
        return list(exprs), operands
    sides = stage_sides(op, operands)
    return [packed_expr(e, sides) for e in exprs], {**operands, **host_scalars(op)}


def build_views(op: "ir.Operation", spec: AttentionBwdSpec, grid: tuple[Expr, Expr, Expr]):
    """In front of the stage op `op` (inside its kernel): the per-sequence view of each packed operand
    and the guard that this work-group has work. Returns (the operands the body takes: views in place
    of the packed ones, cu_seqlens dropped; the scf.if whose then-block the body goes into)."""
    names = fmha.OPS[op.name].operand_names(spec)
    operands = dict(zip(names, op.operands))
    sides = stage_sides(op, operands)
    batch_axis, rows = _grid_roles(grid, sides, op)
    ids = [gpu.block_id(getattr(gpu.Dimension, d)) for d in _BLOCK_DIMS]
    b = ids[batch_axis]
    starts, lengths = {}, {}
    for side, cu in zip("qk", CU_SEQLENS):
        start = _load_index(operands[cu], b)
        starts[side] = start
        lengths[side] = arith.subi(_load_index(operands[cu], arith.addi(b, index(1))), start)
    batches = arith.subi(memref.dim(operands[CU_SEQLENS[0]], index(0)), index(1))
    body_operands = [(_view(operands[n], starts[sides[n]], lengths[sides[n]], batches) if n in sides else operands[n])
                     for n in names if n not in CU_SEQLENS]
    axis, per_block, side = rows
    first = arith.muli(ids[axis], index(per_block))
    guard = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, first, lengths[side]))
    return body_operands, guard


def _grid_roles(grid, sides: dict[str, str], op) -> tuple[int, tuple[int, int, str]]:
    """(the grid axis of the batch, (the axis of the sequence's rows or key blocks, positions per
    block, its side)) read from the body's launch grid over the logical operands."""
    batch_axis, rows = None, None
    for axis, expr in enumerate(grid):
        per_block = 1
        if isinstance(expr, BinOp) and expr.op == "ceildiv" and isinstance(expr.rhs, int):
            expr, per_block = expr.lhs, expr.rhs
        if isinstance(expr, Dim) and expr.buffer in sides:
            if expr.index == 0:
                batch_axis = axis
            elif expr.index == 2:
                rows = (axis, per_block, sides[expr.buffer])
    if batch_axis is None or rows is None:
        raise PassFailure("varlen needs a launch grid with a batch axis and a sequence axis over packed "
                          f"operands; this body's grid is {grid}", op)
    return batch_axis, rows


def _load_index(cu: "ir.Value", at: "ir.Value") -> "ir.Value":
    return arith.index_cast(ir.IndexType.get(), memref.load(cu, [at]))


def _view(packed: "ir.Value", start, length, batches) -> "ir.Value":
    """The rank-4 (lse: rank-3) per-sequence view of a packed operand (the module docstring)."""
    t = ir.MemRefType(packed.type)
    meta = memref.ExtractStridedMetadataOp(packed)
    offset, strides = meta.offset, list(meta.strides)
    if t.rank == 2:   # lse [H, T]: tokens contiguous
        sizes, static_sizes = [batches, meta.sizes[0], length], [DYNAMIC] * 3
        dyn_strides, static_strides = [strides[0]], [0, DYNAMIC, 1]
        begin = arith.addi(offset, start)
        text = "memref<?x?x?xf32, strided<[0, ?, 1], offset: ?>>"
    else:             # [T, H, D] -> [B, H, len, D]
        sizes, static_sizes = [batches, meta.sizes[1], length], [DYNAMIC] * 3 + [t.shape[2]]
        dyn_strides, static_strides = [strides[1], strides[0]], [0, DYNAMIC, DYNAMIC, 1]
        begin = arith.addi(offset, arith.muli(start, strides[0]))
        text = f"memref<?x?x?x{t.shape[2]}x{t.element_type}, strided<[0, ?, ?, 1], offset: ?>>"
    return memref.reinterpret_cast(ir.Type.parse(text), meta.base_buffer, [begin], sizes, dyn_strides,
                                   [DYNAMIC], static_sizes, static_strides)
