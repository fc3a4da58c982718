"""fmha-stages-to-gpu: each stage op -> a gpu.func kernel plus a host gpu.launch_func (docs/ir.md level 3).

The kernel's arguments are the stage op's operands and its body is the stage op itself, so a body's
expansion later works on one kernel at a time. The plan of the body named by the op's config gives the
launch geometry (fmha_mlir.bodies.BodyPlan): grid sizes are expressions of the operands' sizes, built as memref.dim +
arith ops so that the compile tool can read the launch plan back from the IR.
"""
from __future__ import annotations

import dataclasses

from fmha_mlir.bodies import ACCUMULATE, DQ_DONE, READ, WRITE, BodyPlan
from fmha_mlir.dialects import fmha
from fmha_mlir.dialects.fmha_attrs import ACCESS_ATTRIBUTE, describe_kernel
from fmha_mlir.mlir import gpu, ir

from .base import FmhaPass, PassFailure, rewriting
from .ir_builders import collect_ops, enclosing_op, expr_value, i32, index
from .tma_copy import host_tensor_map, tensor_map_params
from .varlen_views import sized
from .verify import verified_plan

KERNEL_MODULE = "fmha_kernels"
STAGE_CLASSES = {stage.NAME: stage for stage in fmha.STAGE_OPS}


@dataclasses.dataclass(frozen=True)
class StagesToGpu(FmhaPass):
    NAME = "fmha-stages-to-gpu"
    DESCRIPTION = "Outline each fmha stage op into a gpu.func kernel launched by gpu.launch_func"

    def run_on_module(self, module: "ir.Operation") -> None:
        stages = [op for op in collect_ops(module, list(STAGE_CLASSES))
                  if enclosing_op(op, "gpu.module") is None]
        if not stages:
            return
        module.attributes["gpu.container_module"] = ir.UnitAttr.get(module.context)
        kernels = _kernel_module(module)
        for op in stages:
            plan = verified_plan(op)
            spec, config, stage = plan.spec, plan.config, stage_name(op)
            launch = plan.launch(stage)
            name = kernel_symbol(spec, config, stage)
            _ensure_kernel(kernels, name, op, launch.block, spec, config, len(launch.tensor_maps))
            with rewriting(op):
                operands = STAGE_CLASSES[op.name].named_operands(op, spec)
                access = operand_access(op.name, list(operands), plan) + [m.access for m in launch.tensor_maps]
                maps = [host_tensor_map(operands[m.operand], m.box, m.swizzle) for m in launch.tensor_maps]
                exprs, operands = sized(launch.grid, op, spec, operands)
                grid = [expr_value(e, operands) for e in exprs]
                shared = i32(launch.shared_bytes) if launch.shared_bytes else None
                launched = gpu.LaunchFuncOp([KERNEL_MODULE, name], grid, [index(n) for n in launch.block],
                                            list(op.operands) + maps, dynamic_shared_memory_size=shared)
                launched.operation.attributes[ACCESS_ATTRIBUTE] = ir.ArrayAttr.get(
                    [ir.StringAttr.get(a) for a in access])
            op.erase()


def operand_access(stage_op: str, names: list[str], plan: BodyPlan) -> list[str]:
    """How the stage's kernel uses each operand: the row kernels write their output (d, a converted
    gradient; dsinks is added into unless stored per row), dq_dk_dv writes or accumulates each
    `<grad>_out`, as the body's plan says, adds into deterministic dQ's semaphores and dq_done, and writes dq
    where it converts dQ itself; the rest is read."""
    outputs = {fmha.DotDoOOp.NAME: plan.row_output_access, fmha.ConvertGradOp.NAME: {"out": WRITE},
               fmha.DqDkDvOp.NAME: {**{f"{g}_out": a for g, a in plan.output_access.items()},
                                    fmha.DqDkDvOp.SEMAPHORES: ACCUMULATE, DQ_DONE: ACCUMULATE, "dq": WRITE}}
    return [outputs[stage_op].get(name, READ) for name in names]


def kernel_symbol(spec, config, stage: str) -> str:
    """<spec.kernel_prefix>_<config.tag>_<stage> (docs/ir.md, kernel symbols)."""
    return f"{spec.kernel_prefix}_{config.tag}_{stage}"


def _kernel_module(module: "ir.Operation") -> "ir.Operation":
    """The module's `gpu.module @fmha_kernels`, created at the end of the module if absent."""
    body = module.regions[0].blocks[0]
    existing = _symbol_op(body, KERNEL_MODULE)
    if existing is not None:
        if existing.name != "gpu.module":
            raise PassFailure(f"symbol @{KERNEL_MODULE} is taken by a {existing.name}; the kernels need it for "
                              "their gpu.module: rename that op", existing)
        return existing
    with ir.InsertionPoint(body), module.location:
        kernels = gpu.GPUModuleOp(KERNEL_MODULE)
        kernels.bodyRegion.blocks.append()
    return kernels.operation


def _ensure_kernel(kernels: "ir.Operation", name: str, stage: "ir.Operation", block: tuple[int, int, int],
                   spec, config, tensor_maps: int = 0) -> None:
    """Add `gpu.func @name` wrapping a copy of `stage` unless the same kernel is already there. The kernel
    keeps the spec and config as `fmha.spec` / `fmha.config`, so every later stage says what it computes;
    `tensor_maps` tensor-map parameters follow the stage's operands (the body finds them there)."""
    body = kernels.regions[0].blocks[0]
    operands = [value.type for value in stage.operands]
    operand_types = operands + [ir.Type.parse("!llvm.ptr")] * tensor_maps
    existing = _symbol_op(body, name)
    if existing is not None:
        if existing.name != "gpu.func":
            raise PassFailure(f"kernel symbol @{name} is taken by a {existing.name} in gpu.module "
                              f"@{KERNEL_MODULE}: rename that op", stage)
        _check_same_kernel(existing, name, stage, operand_types)
        return
    with ir.InsertionPoint(body), stage.location:
        kernel = gpu.GPUFuncOp(ir.FunctionType.get(operand_types, []), sym_name=name,
                               known_block_size=list(block))
        # Not the builder's kernel=True: it adds a discardable `gpu.kernel` attribute next to the
        # `kernel` property, and convert-gpu-to-rocdl/-nvvm then abort on the duplicate.
        kernel.operation.attributes["kernel"] = ir.UnitAttr.get()
        describe_kernel(kernel.operation, spec, config)
        entry = kernel.body.blocks.append(*operand_types, arg_locs=[stage.location] * len(operand_types))
        if tensor_maps:
            tensor_map_params(kernel.operation, list(range(len(operands), len(operand_types))))
    with ir.InsertionPoint(entry), stage.location:
        copy = stage.clone()
        for i, arg in enumerate(entry.arguments[:len(operands)]):
            copy.operands[i] = arg
        gpu.return_([])


def _check_same_kernel(kernel: "ir.Operation", name: str, stage: "ir.Operation", operand_types: list) -> None:
    """PassFailure unless the existing `kernel` computes exactly what `stage` asks for.

    Kernel symbols name the spec, but a module may already hold a kernel of that symbol (a user's, or
    one built from other operand layouts) that computes something else.
    """
    existing = list(ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value).inputs)
    if existing != operand_types:
        raise PassFailure(
            f"kernel @{name} already exists with argument types ({_types(existing)}), but this stage has "
            f"operand types ({_types(operand_types)}); give the two problems the same operand types", stage)
    first = kernel.regions[0].blocks[0].operations[0].operation
    if first.name != stage.name:  # already expanded: nothing left to compare but the types
        return
    theirs, ours = _attributes(first), _attributes(stage)
    differing = [f"{key} = {ours.get(key)} here, {theirs.get(key)} there"
                 for key in sorted(set(theirs) | set(ours)) if theirs.get(key) != ours.get(key)]
    if differing:
        raise PassFailure(f"kernel @{name} already exists for other attributes ({'; '.join(differing)}); "
                          f"its symbol cannot tell the two apart", stage)


def _types(types: list) -> str:
    return ", ".join(str(t) for t in types)


def _attributes(op: "ir.Operation") -> dict[str, str]:
    return {name: str(op.attributes[name]) for name in op.attributes}


def stage_name(op: "ir.Operation") -> str:
    """dot_do_o, dq_dk_dv, convert_dk, convert_dv (docs/ir.md kernel symbols)."""
    if op.name == fmha.ConvertGradOp.NAME:
        return f"convert_{fmha.ConvertGradOp.grad_of(op)}"
    return op.name.removeprefix("fmha.")


def _symbol_op(block: "ir.Block", name: str) -> "ir.Operation | None":
    """The op of `block` that defines symbol `name`, whatever kind of op it is."""
    for op in block.operations:
        op = op.operation
        if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None
