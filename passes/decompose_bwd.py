"""fmha-decompose-bwd: the problem op -> the three stages and their workspaces (docs/ir.md level 2).

The op's kernel config names the body; the body's plan (fmha_mlir.bodies.BodyPlan) says which gradients
accumulate in f32 workspaces: the warp body sums dK / dV by atomics (into the outputs for f32), the tiled body
sums dQ by atomics into a row-padded workspace (deterministic mode: one partial per key block, written,
and summed in order by the convert; grad_accum = "bf16": by packed bf16 atomics into dq itself, zero-filled,
no workspace and no convert). The bias's gradient accumulates the same way for every body
(bodies.bias_accumulation), and so does dsinks (bodies.sink_accumulation): by atomics in dot_do_o, or
stored per row and summed by a convert in deterministic mode.

    d = alloc [B, Hq, Sq] f32;  [dsinks zero-filled];  dot_do_o(o, do, [dlse], [lse, sinks], d, [dsinks | dsinks_acc])
    <grad>_acc = alloc f32 (shape from the body), zero-filled; outputs the body accumulates into, zero-filled
    dq_dk_dv(q, k, v, do, lse, d, [bias | alibi_slopes], dq_acc | dq, dk_acc | dk, dv_acc | dv,
             [dbias_acc | dbias | dalibi_slopes])
    convert_grad(<grad>_acc, <grad>) {grad = "<grad>"} for each accumulator dq_dk_dv does not convert itself
                                                 (config.dq_convert_rows: dq_dk_dv(..., dq, dq_done) {dq_converted})
    dealloc the workspaces
"""
from __future__ import annotations

import dataclasses

from fmha_mlir.bodies import DQ_DONE, DQ_SEMAPHORES, BodyPlan, Workspace
from fmha_mlir.dialects import fmha
from fmha_mlir.dialects.fmha_attrs import WORKSPACE_ATTRIBUTE
from fmha_mlir.dialects.fmha_types import TensorKind
from fmha_mlir.mlir import arith, gpu, ir, memref
from fmha_mlir.spec import AttentionBwdSpec

from .base import FmhaPass, PassFailure, rewriting
from .ir_builders import collect_ops, expr_value, f32
from .varlen_views import sized
from .verify import verified_plan, verified_spec

@dataclasses.dataclass(frozen=True)
class DecomposeBwd(FmhaPass):
    NAME = "fmha-decompose-bwd"
    DESCRIPTION = "Split fmha.attention_bwd into dot_do_o, dq_dk_dv and convert_grad stages with workspaces"

    def run_on_module(self, module: "ir.Operation") -> None:
        for op in collect_ops(module, [fmha.AttentionBwdOp.NAME]):
            if "config" not in op.attributes:
                verified_spec(op)   # a malformed spec says so first
                raise PassFailure("the problem op has no kernel config: run fmha-select-kernel-config{target=...} "
                                  "first", op)
            plan = verified_plan(op)
            with rewriting(op):
                _decompose(op, plan)
            op.erase()


def _decompose(op: "ir.Operation", plan: BodyPlan) -> None:
    spec, config, workspaces = plan.spec, plan.config, plan.workspaces
    operands = fmha.AttentionBwdOp.named_operands(op, spec)
    allocated = {w.name: _allocate(w, op, spec, operands) for w in workspaces}
    accumulators = {w.grad: w for w in workspaces if w.grad is not None}
    cu = [operands[n] for n in fmha.varlen_operands(spec)]   # varlen: every stage op takes them, last
    for name in plan.row_zeroed_outputs:   # dot_do_o adds into dsinks
        gpu.memset(None, [], operands[name], f32(0.0))
    row_outputs = {"d": allocated["d"].strided,
                   **{f"{g}_out": allocated[accumulators[g].name].strided if g in accumulators else operands[g]
                      for g in spec.row_operands()[1]}}
    fmha.DotDoOOp.build(spec, [row_outputs.get(n, operands.get(n)) for n in fmha.DotDoOOp.operand_names(spec)],
                        config)

    zero = f32(0.0)

    def zero_fill(buffer: "ir.Value") -> None:
        element = ir.MemRefType(buffer.type).element_type
        value = zero if element == zero.type else arith.constant(
            element, 0 if isinstance(element, ir.IntegerType) else 0.0)
        gpu.memset(None, [], buffer, value)

    for workspace in workspaces:
        if workspace.zero:
            zero_fill(allocated[workspace.name].strided)
    for name in plan.zeroed_outputs:
        zero_fill(operands[name])

    bias_inputs, bias_grads = spec.bias_operands()
    outs = [allocated[accumulators[g].name].strided if g in accumulators else operands[g]
            for g in fmha.GRADS + bias_grads]
    semaphores = [allocated[DQ_SEMAPHORES].strided] if DQ_SEMAPHORES in allocated else []
    # dQ converted by dq_dk_dv itself (config.dq_convert_rows): the gradient and its head counters.
    in_main = "dq" in accumulators and accumulators["dq"].converted_in_main
    converted = [operands["dq"], allocated[DQ_DONE].strided] if in_main else []
    fmha.DqDkDvOp.build(spec, [operands[n] for n in ("q", "k", "v", "do", "lse")] + [allocated["d"].strided]
                        + [operands[n] for n in bias_inputs] + outs + semaphores + converted + cu, config,
                        dq_semaphores=bool(semaphores), dq_converted=bool(converted))
    for grad, workspace in accumulators.items():
        if workspace.converted_in_main:
            continue
        by_key_block = workspace.partials and grad == "dq"   # the convert reads only the partials written
        fmha.ConvertGradOp.build(spec, [allocated[workspace.name].strided, operands[grad]]
                                 + ([operands["k"]] if by_key_block else []) + cu, config, grad=grad,
                                 factor=workspace.factor, partials=workspace.partials)
    for workspace in allocated.values():
        memref.dealloc(workspace.allocated)


@dataclasses.dataclass(frozen=True)
class _Allocated:
    allocated: "ir.Value"  # the identity-layout alloc (what is deallocated)
    strided: "ir.Value"    # the same buffer cast to the contract type the stage ops take


def _allocate(workspace: Workspace, op: "ir.Operation", spec: AttentionBwdSpec, operands: dict) -> _Allocated:
    """A contiguous buffer of the workspace's shape and element, named for the launch plan, cast to the
    contract type. Varlen: padded per batch, [B, H, max length, D] (fmha_mlir/varlen.py)."""
    dynamic = ir.ShapedType.get_dynamic_size()
    shape = [d if isinstance(d, int) else dynamic for d in workspace.dims]
    dims, operands = sized(workspace.dims, op, spec, operands)
    sizes = [expr_value(d, operands) for d in dims if not isinstance(d, int)]
    alloc = memref.alloc(ir.MemRefType.get(shape, ir.Type.parse(workspace.element)), sizes, [])
    alloc.owner.attributes[WORKSPACE_ATTRIBUTE] = ir.StringAttr.get(workspace.name)
    inner = workspace.dims[-1] if isinstance(workspace.dims[-1], int) else None
    strided = TensorKind(len(shape), (workspace.element,), inner).contract_type()
    return _Allocated(alloc, memref.cast(strided, alloc))
