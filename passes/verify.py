"""Checks run before MLIR sees the IR: the fmha lowering passes' own, and upstream passes' abort traps."""
from __future__ import annotations

from fmha_mlir.bodies import BodyPlan, body_plan
from fmha_mlir.dialects import fmha
from fmha_mlir.errors import SpecError
from fmha_mlir.mlir import ir
from fmha_mlir.spec import AttentionBwdSpec

from .base import PassFailure
from .ir_builders import collect_ops


def check_verified(op) -> None:
    """PassFailure, at `op`, with every problem the fmha verifier finds in it (the fmha ops are
    unregistered: MLIR checked nothing about them)."""
    problems = fmha.verify_op(op)
    if problems:
        raise PassFailure("invalid op: " + "; ".join(problems), op)


def verified_spec(op) -> AttentionBwdSpec:
    """`op`'s spec after the fmha verifier accepted `op`; PassFailure with its problems otherwise."""
    check_verified(op)
    return fmha.spec_from_op(op)


def verified_plan(op) -> BodyPlan:
    """The plan of the body `op`'s config names, for `op`'s spec (made once per spec and config), after
    the fmha verifier accepted `op`; PassFailure with the verifier's problems, or with every reason the
    body cannot compute the spec."""
    spec = verified_spec(op)
    config = fmha.config_of(op)
    try:
        return body_plan(spec, config)
    except SpecError as exc:
        raise PassFailure(f"the {config.body} body cannot compute this spec with config {config.tag}: "
                          + "; ".join(map(str, exc.reasons)), op) from None


def abort_traps(module) -> list[tuple["ir.Operation", str]]:
    """(op, why) for IR that an upstream pass would abort the whole process on, instead of reporting it.

    convert-gpu-to-rocdl / -nvvm add `gpu.kernel` to the llvm.func they make and assert on a duplicate
    attribute when the gpu.func already carries one (a discardable copy of the `kernel` keyword).
    """
    return [(func, "gpu.func carries a 'gpu.kernel' attribute, which convert-gpu-to-rocdl/-nvvm would add a "
                   "second time and abort on: drop it (write the `kernel` keyword instead)")
            for func in collect_ops(module, ["gpu.func"]) if "gpu.kernel" in func.attributes]
