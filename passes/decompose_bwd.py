"""fmha-decompose-bwd: the problem op -> the three stages and their workspaces (docs/ir.md level 2).

    d = alloc [B, Hq, Sq] f32;  dot_do_o(o, do, d)
    T != f32: dk_acc, dv_acc = alloc f32 like dk / dv, zero-filled;  T == f32: dk, dv zero-filled
    dq_dk_dv(q, k, v, do, lse, d, dq, dk_acc | dk, dv_acc | dv)
    convert_grad(dk_acc, dk) {grad = "dk"}, convert_grad(dv_acc, dv) {grad = "dv"}  (T != f32 only)
    dealloc the workspaces
"""
from __future__ import annotations

import dataclasses

from fmha_mlir.dialects import fmha
from fmha_mlir.dialects.fmha_types import rows_type, tensor_type
from fmha_mlir.mlir import gpu, ir, memref
from fmha_mlir.spec import AttentionBwdSpec

from .base import FmhaPass, rewriting
from .ir_builders import collect_ops, dims, f32, memref_type
from .verify import verified_spec


@dataclasses.dataclass(frozen=True)
class DecomposeBwd(FmhaPass):
    NAME = "fmha-decompose-bwd"
    DESCRIPTION = "Split fmha.attention_bwd into dot_do_o, dq_dk_dv and convert_grad stages with workspaces"

    def run_on_module(self, module: "ir.Operation") -> None:
        for op in collect_ops(module, [fmha.AttentionBwdOp.NAME]):
            spec = verified_spec(op)
            with rewriting(op):
                _decompose(op, spec)
            op.erase()


def _decompose(op: "ir.Operation", spec: AttentionBwdSpec) -> None:
    q, k, v, o, do, lse, dq, dk, dv = op.operands
    d_alloc = _workspace(lse, rows_type())
    fmha.DotDoOOp.build(spec, [o, do, d_alloc.strided])

    zero = f32(0.0)
    accumulators = []
    if spec.dtype == "f32":
        # dK / dV accumulate straight into the outputs: only zero-fill them.
        dk_out, dv_out = dk, dv
    else:
        dk_acc = _workspace(dk, tensor_type("f32", spec.hdim_q))
        dv_acc = _workspace(dv, tensor_type("f32", spec.hdim_v))
        accumulators = [(dk_acc, dk, "dk"), (dv_acc, dv, "dv")]
        dk_out, dv_out = dk_acc.strided, dv_acc.strided
    for buffer in (dk_out, dv_out):
        gpu.memset(None, [], buffer, zero)

    fmha.DqDkDvOp.build(spec, [q, k, v, do, lse, d_alloc.strided, dq, dk_out, dv_out])
    for acc, out, grad in accumulators:
        fmha.ConvertGradOp.build(spec, [acc.strided, out], grad=grad)
    for workspace in [d_alloc] + [acc for acc, _, _ in accumulators]:
        memref.dealloc(workspace.allocated)


@dataclasses.dataclass(frozen=True)
class _Workspace:
    allocated: "ir.Value"  # the identity-layout alloc (what is deallocated)
    strided: "ir.Value"    # the same buffer cast to the contract type the stage ops take


def _workspace(like: "ir.Value", strided_type: "ir.MemRefType") -> _Workspace:
    """A contiguous f32 buffer with the (dynamic) sizes of `like`, cast to `strided_type`."""
    like_type = memref_type(like)
    identity = ir.MemRefType.get(like_type.shape, ir.F32Type.get())
    dynamic = [i for i in range(like_type.rank) if like_type.is_dynamic_dim(i)]
    allocated = memref.alloc(identity, dims(like, dynamic), [])
    return _Workspace(allocated, memref.cast(strided_type, allocated))
