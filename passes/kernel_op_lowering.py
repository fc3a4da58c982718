"""What convert-fmha-to-rocdl and convert-fmha-to-nvvm share.

Both passes replace the kernel-level ops of docs/ir.md level 4 inside gpu.func bodies. masked_score
and atomic_add lower to the same target-neutral ops on every target, and the xor-shuffle butterfly is
the NVIDIA reduction as well as the AMD one for partial waves. Each target pass supplies only its own
wave_reduce and exp2 lowering through `lower_kernel_ops`. The semaphores need an element's address:
both leave them for fmha-semaphores-to-llvm, after the kernel stage (the interpreter runs them as ops).
"""
from __future__ import annotations

from typing import Callable

from fmha_mlir import mask_geometry
from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, gpu, ir, memref, vector

from .base import PassFailure, rewriting
from .ir_builders import collect_ops, enclosing_op, f32, index, splat, vector_shape
from .ix import Ix
from .verify import check_verified

KERNEL_OPS = (fmha.WaveReduceOp.NAME, fmha.Exp2Op.NAME, fmha.MaskedScoreOp.NAME, fmha.AtomicAddOp.NAME,
              *fmha.SEMAPHORE_NAMES)

# A lowering builds the replacement at the op (insertion point and location already set) and returns
# the value that replaces the op's result, or None for ops without results.
Lowering = Callable[["ir.Operation"], "ir.Value | None"]


def lower_kernel_ops(module: "ir.Operation", lowerings: dict[str, Lowering],
                     deferred: Callable[["ir.Operation"], bool] = lambda op: False) -> None:
    """Replace each kernel-level op under `module` with what its lowering in `lowerings` builds; the ops
    `deferred` selects are verified and left for a later pass of the target.

    Every op is verified first (the fmha ops are unregistered: MLIR checked nothing about them).
    """
    for op in collect_ops(module, KERNEL_OPS):
        check_verified(op)
        if enclosing_op(op, "gpu.func") is None:
            raise PassFailure(f"'{op.name}' must be inside a gpu.func (run fmha-stages-to-gpu first)", op)
        if deferred(op):
            continue
        with rewriting(op):
            replacement = lowerings[op.name](op)
        if replacement is not None:
            op.results[0].replace_all_uses_with(replacement)
        op.erase()


def shared_lowerings() -> dict[str, Lowering]:
    """The lowerings that are the same on every target."""
    return {fmha.MaskedScoreOp.NAME: lower_masked_score, fmha.AtomicAddOp.NAME: lower_atomic_add}


# --- fmha.wave_reduce -------------------------------------------------------------------------------


def reduce_width(op: "ir.Operation", wave_size: int) -> int:
    """The lane count of a (verified) wave_reduce, checked against the target's wave."""
    width = fmha.WaveReduceOp.width_of(op)
    if width > wave_size:
        raise PassFailure(f"wave_reduce width {width} exceeds the wave size {wave_size} of this target", op)
    return width


def shuffle_xor_reduce(value: "ir.Value", width: int, wave_size: int) -> "ir.Value":
    """Butterfly sum over each aligned group of `width` lanes; every lane ends with its group's sum.

    Offsets below `width` never leave the group, so the shuffles span the whole wave: upstream's
    `width` operand means "active lanes" on NVVM (a partial member mask) but "segment" on ROCDL.
    Lane l and lane l^o add the same two numbers each step, so all lanes get bit-identical results.
    """
    i32 = ir.IntegerType.get_signless(32)
    wave = arith.constant(i32, wave_size)
    offset = 1
    while offset < width:
        partner, _valid = gpu.shuffle(value, arith.constant(i32, offset), wave, gpu.ShuffleMode.XOR)
        value = arith.addf(value, partner)
        offset *= 2
    return value


# --- fmha.masked_score ------------------------------------------------------------------------------


def lower_masked_score(op: "ir.Operation") -> "ir.Value":
    """dot * scale_log2 where the pair is shown (fmha_mlir.mask_geometry.shown: visible under the mask
    and inside both sequences), -inf elsewhere; elementwise when dot is a vector (scalar operands apply
    to every element)."""
    dot, q_pos, k_pos, seqlen_q, seqlen_k = op.operands
    shape = vector_shape(dot.type)
    score = arith.mulf(dot, splat(f32(fmha.MaskedScoreOp.scale_log2_of(op)), shape))
    positions = (Ix(splat(v, shape)) for v in (q_pos, k_pos, seqlen_q, seqlen_k))
    shown = mask_geometry.shown(fmha.MaskedScoreOp.mask_of(op), *positions)
    return arith.select(shown.value, score, splat(f32(float("-inf")), shape))


def elementwise(value: "ir.Value", scalar_op) -> "ir.Value":
    """scalar_op applied to an f32, or to each element of a 1-D vector (for target ops without vector
    forms, e.g. ex2.approx and v_exp_f32)."""
    if not isinstance(value.type, ir.VectorType):
        return scalar_op(value)
    vector_type = ir.VectorType(value.type)
    parts = [scalar_op(vector.extract(value, [], [i])) for i in range(vector_type.shape[0])]
    return vector.from_elements(vector_type, parts)


# --- fmha.atomic_add --------------------------------------------------------------------------------


def lower_atomic_add(op: "ir.Operation") -> None:
    """memref.atomic_rmw addf, one per element of a vector value (at the last index + i);
    fmha-hardware-atomics later relaxes each to a device-scope hardware add."""
    value, buffer, *indices = op.operands
    width = fmha.AtomicAddOp.width_of(value)
    if width is None:
        memref.atomic_rmw(arith.AtomicRMWKind.addf, value, buffer, indices)
        return None
    for e in range(width):
        last = arith.addi(indices[-1], index(e)) if e else indices[-1]
        memref.atomic_rmw(arith.AtomicRMWKind.addf, vector.extract(value, [], [e]), buffer, indices[:-1] + [last])
    return None


def is_semaphore(op: "ir.Operation") -> bool:
    """fmha.semaphore_wait / _signal: lowered on an address by fmha-semaphores-to-llvm."""
    return op.name in fmha.SEMAPHORE_NAMES


def is_vector_atomic_add(op: "ir.Operation") -> bool:
    """A vector<N x f32> or packed bf16 atomic_add: one instruction on an address (NVIDIA)."""
    return op.name == fmha.AtomicAddOp.NAME and (fmha.AtomicAddOp.width_of(op.operands[0]) is not None
                                                 or fmha.AtomicAddOp.is_packed_bf16(op.operands[0]))


def is_packed_atomic_add(op: "ir.Operation") -> bool:
    """A packed bf16 atomic_add: memref.atomic_rmw has no vector form, so it waits for an address."""
    return op.name == fmha.AtomicAddOp.NAME and fmha.AtomicAddOp.is_packed_bf16(op.operands[0])
