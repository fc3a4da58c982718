"""What the body-expansion passes share: find the stage ops of one body inside gpu.funcs, check that
their kernel was launched as the body expects, and replace each by what the body builds."""
from __future__ import annotations

from typing import Callable

from fmha_mlir.bodies import BodyPlan
from fmha_mlir.dialects import fmha
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.mlir import ir, scf
from fmha_mlir.spec import AttentionBwdSpec

from .base import PassFailure, rewriting
from .ir_builders import collect_ops, enclosing_op
from .stages_to_gpu import stage_name
from .varlen_views import build_views
from .verify import verified_plan

# builder(stage op, spec, config): builds the stage's body in front of the op.
StageBuilder = Callable[["ir.Operation", AttentionBwdSpec, KernelConfig], None]


def expand_stages(module: "ir.Operation", body: str, builders: dict[str, StageBuilder]) -> None:
    """Expand every stage op under `module` whose config names `body` with builders[op.name]."""
    for op in collect_ops(module, builders):
        config = fmha.config_of(op)
        if config.body != body:
            continue
        plan = _checked_plan(op, config)
        with rewriting(op):
            if plan.spec.varlen:
                _build_on_views(op, plan, builders[op.name])
            else:
                builders[op.name](op, plan.spec, config)
        op.erase()


def _build_on_views(op: "ir.Operation", plan: BodyPlan, builder: StageBuilder) -> None:
    """Varlen: the body is built, under the guard that this work-group has work, on a copy of the stage
    op that takes the per-sequence views (passes/varlen_views.py); the copy is erased once built."""
    spec, config = plan.spec, plan.config
    operands, guard = build_views(op, spec, plan.launch(stage_name(op)).grid)
    with ir.InsertionPoint(guard.then_block):
        on_views = ir.Operation.create(op.name, results=[], operands=operands,
                                       attributes={name: op.attributes[name] for name in op.attributes})
        scf.yield_([])
    with rewriting(on_views):
        builder(on_views, spec, config)
    on_views.erase()


def _checked_plan(op: "ir.Operation", config: KernelConfig) -> BodyPlan:
    """The op's body plan once the op is known to be expandable here; PassFailure saying why not."""
    kernel = enclosing_op(op, "gpu.func")
    if kernel is None:
        raise PassFailure(f"'{op.name}' is outside a gpu.func; run fmha-stages-to-gpu first", op)
    plan = verified_plan(op)
    launch = plan.launch(stage_name(op))
    block = kernel.attributes["known_block_size"] if "known_block_size" in kernel.attributes else None
    if block is None or list(ir.DenseI32ArrayAttr(block)) != list(launch.block):
        got = "none" if block is None else list(ir.DenseI32ArrayAttr(block))
        raise PassFailure(f"the enclosing kernel has known_block_size {got} but the {config.body} body's "
                          f"{stage_name(op)} needs {list(launch.block)}: outline it with fmha-stages-to-gpu", op)
    return plan
