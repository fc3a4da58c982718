"""fmha-semaphores-to-llvm: fmha.semaphore_wait / fmha.semaphore_signal -> LLVM atomics on the element's
address, in the target's device-wide sync scope (hardware_atomics.SYNC_SCOPES).

A wait is a spin on an acquire load until the element holds the value (NVIDIA: ld.acquire.gpu in a
loop; gfx942: a load with sc1 and a cache invalidate), with the op's backoff_ns a sleep between polls
(nanosleep; s_sleep), a signal one release add of 1 (atom.release.gpu; gfx942: a write-back, then the
add). No fence beside them: the acquire and the release order what follows and what came before.
Runs after the kernel stage (the interpreter runs the ops themselves), before the gpu.module becomes
LLVM, on either target.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, ir, scf

from .base import FmhaPass, rewriting
from .hardware_atomics import SYNC_SCOPES
from .ir_builders import collect_ops, element_pointer
from .verify import check_verified

# LLVM's AtomicOrdering and AtomicRMW BinOp values, as the generic forms of llvm.load / llvm.atomicrmw hold them.
ACQUIRE, RELEASE, RMW_ADD = 4, 5, 1
# s_sleep N sleeps about 64 x N clocks (AMD CDNA3 ISA, S_SLEEP), N at most 127: about 30 ns a unit at
# gfx942's 2.1 GHz.
S_SLEEP_NS, S_SLEEP_MAX = 30, 127


@dataclasses.dataclass(frozen=True)
class SemaphoresToLlvm(FmhaPass):
    NAME: ClassVar[str] = "fmha-semaphores-to-llvm"
    DESCRIPTION: ClassVar[str] = "Lower fmha semaphore waits and signals to acquire / release LLVM atomics"

    target: str = "nvidia"   # whose device-wide sync scope: amd or nvidia

    def __post_init__(self):
        if self.target not in SYNC_SCOPES:
            raise ValueError(f"unknown target {self.target!r}; use amd or nvidia")

    def run_on_module(self, module: "ir.Operation") -> None:
        scope = SYNC_SCOPES[self.target]
        for op in collect_ops(module, list(fmha.SEMAPHORE_NAMES)):
            check_verified(op)
            with rewriting(op):
                if op.name == fmha.SemaphoreWaitOp.NAME:
                    _wait(op, scope, self.target)
                else:
                    _signal(op, scope)
            op.erase()


def _i64(value: int) -> "ir.IntegerAttr":
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


def _wait(op: "ir.Operation", scope: str, target: str) -> None:
    value, buffer, *indices = op.operands
    backoff_ns = fmha.SemaphoreWaitOp.backoff_of(op)
    pointer = element_pointer(buffer, list(indices))
    loop = scf.WhileOp([], [])
    with ir.InsertionPoint(loop.before.blocks.append()):
        current = ir.Operation.create("llvm.load", results=[value.type], operands=[pointer], attributes={
            "alignment": _i64(4), "ordering": _i64(ACQUIRE), "syncscope": ir.StringAttr.get(scope)}).result
        scf.condition(arith.cmpi(arith.CmpIPredicate.ne, current, value), [])
    with ir.InsertionPoint(loop.after.blocks.append()):
        if backoff_ns:
            _sleep(backoff_ns, target)
        scf.yield_([])


def _sleep(nanoseconds: int, target: str) -> None:
    """About `nanoseconds` of sleep for the executing wave / warp."""
    i32 = ir.IntegerType.get_signless(32)
    if target == "nvidia":
        ir.Operation.create("nvvm.nanosleep", results=[], operands=[arith.constant(i32, nanoseconds)])
    else:
        count = min(S_SLEEP_MAX, -(-nanoseconds // S_SLEEP_NS))
        ir.Operation.create("rocdl.s.sleep", results=[], attributes={"count": ir.IntegerAttr.get(i32, count)})


def _signal(op: "ir.Operation", scope: str) -> None:
    buffer, *indices = op.operands
    pointer = element_pointer(buffer, list(indices))
    i32 = ir.IntegerType.get_signless(32)
    ir.Operation.create("llvm.atomicrmw", results=[i32], operands=[pointer, arith.constant(i32, 1)], attributes={
        "bin_op": _i64(RMW_ADD), "ordering": _i64(RELEASE), "syncscope": ir.StringAttr.get(scope)})
