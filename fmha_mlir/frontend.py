"""The frontend: an AttentionBwdSpec becomes a level-1 module (docs/ir.md), the pipeline's input."""
from __future__ import annotations

from fmha_mlir.dialects.fmha import AttentionBwdOp, operand_names, tensor_kinds
from fmha_mlir.dialects.fmha_attrs import OPERAND_ATTRIBUTE
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.mlir import func, ir
from fmha_mlir.spec import AttentionBwdSpec
from fmha_mlir.varlen import MAX_SEQLENS


def problem_types(spec: AttentionBwdSpec, ctx: "ir.Context") -> dict[str, "ir.Type"]:
    """The memref type of each operand of fmha.attention_bwd, by operand name, in operand order."""
    spec.check()
    kinds = tensor_kinds(spec)
    with ctx:
        return {name: kinds[name].contract_type() for name in operand_names(spec)}


def build_problem_module(spec: AttentionBwdSpec, ctx: "ir.Context", config: KernelConfig | None = None) -> "ir.Module":
    """A module with `func.func @<kernel_prefix>(q, k, v, o, do, lse, [bias], dq, dk, dv, [dbias],
    [cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k])` holding one fmha.attention_bwd (with
    `config` when given; else fmha-select-kernel-config chooses one); each argument is named by its
    `fmha.operand` attribute. Varlen's max lengths are index arguments of the function only: they size
    grids and workspaces, no op reads them. SpecError (before any IR is built) when the spec is invalid."""
    types = problem_types(spec, ctx)
    with ctx, ir.Location.name(spec.kernel_prefix):
        if spec.varlen:
            types.update({name: ir.IndexType.get() for name in MAX_SEQLENS})
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            function = func.FuncOp(spec.kernel_prefix, (list(types.values()), []))
            function.arg_attrs = ir.ArrayAttr.get([ir.DictAttr.get({OPERAND_ATTRIBUTE: ir.StringAttr.get(name)})
                                                   for name in types])
            # Name each argument's location after its operand, so diagnostics say which tensor.
            entry = function.add_entry_block([ir.Location.name(name) for name in types])
            with ir.InsertionPoint(entry):
                operands = len(operand_names(spec))
                AttentionBwdOp.build(spec, list(entry.arguments)[:operands], config)
                func.ReturnOp([])
    return module


def name_problem_arguments(module: "ir.Module") -> None:
    """Give `fmha.operand` names to the arguments of a hand-written level-1 function that has none:
    when its one fmha.attention_bwd takes exactly its arguments, in some order, each argument is named
    after the operand it is (docs/ir.md lets the problem op name them). Others are left as they are
    (the launch plan then says which argument is unnamed)."""
    from fmha_mlir.dialects.fmha import spec_from_op

    for function in module.body.operations:
        if function.operation.name != "func.func" or "arg_attrs" in function.attributes:
            continue
        arguments = list(function.regions[0].blocks[0].arguments)
        problems = [op for op in function.regions[0].blocks[0].operations if op.operation.name == AttentionBwdOp.NAME]
        if len(problems) != 1:
            continue
        spec = spec_from_op(problems[0])
        operands = list(problems[0].operands)
        if (spec.varlen or sorted(map(str, operands)) != sorted(map(str, arguments))
                or len(set(map(str, operands))) != len(operands)):
            continue
        names = dict(zip(map(str, operands), operand_names(spec)))
        function.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [ir.DictAttr.get({OPERAND_ATTRIBUTE: ir.StringAttr.get(names[str(a)])}) for a in arguments])
