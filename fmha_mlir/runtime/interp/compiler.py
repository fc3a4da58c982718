"""Turns a parsed gpu.func into Python closures, one per op, so running a kernel never dispatches on
op names: each closure reads its operands from a slot list, makes one NumPy call over all lanes and
writes its results back.

A closure is `run(state, mask)`: `mask` is None when every lane executes, else a bool array [lanes]
(divergent control flow). Pure ops compute every lane regardless (cheaper than masking, and lanes
that do not execute never observe the values); ops with effects (stores, atomics, cross-lane reads,
errors) honour the mask.

A value's slot is cleared after the last op of its own block that uses it (uses inside an op's regions
count as uses by that op, so values a loop body reads from outside stay alive until the loop is done;
a terminator's operands are never cleared, the parent op reads them), so a launch holds only the
values that are still needed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import InterpreterError
from .lanes import LaneGrid
from .parser import Operation, ParsedModule, Region

ENUM_WORD = re.compile(r"<(\w+)>")   # the word of a dialect enum attribute: #nvvm.mma_layout<row>

TERMINATORS = ("scf.yield", "scf.condition", "gpu.return", "func.return")


class State:
    """What the closures of one launch chunk (one role of it, in a warp-specialised kernel) share: the
    value slots, the lanes, the atomic order, the workgroup memory (workgroup.WorkgroupMemory: buffers,
    epochs, async copies), a cache for lane tables that depend only on the geometry (e.g. a DPP
    control's source lanes), and the role scheduler, if any."""

    __slots__ = ("env", "grid", "rng", "atomic_order", "workgroup", "cache", "scheduler")

    def __init__(self, slots: int, grid: LaneGrid, rng: np.random.Generator, atomic_order: str, workgroup):
        self.env: list = [None] * slots
        self.grid = grid
        self.rng = rng
        self.atomic_order = atomic_order
        self.workgroup = workgroup
        self.cache: dict = {}
        self.scheduler = None   # roles.RoleScheduler of a warp-specialised kernel: waits suspend a role

    def atomic_permutation(self):
        """The order lanes apply an atomic in: None for lane order, else a fresh random permutation."""
        if self.atomic_order == "random":
            return self.rng.permutation(self.grid.lanes)
        return None


Closure = Callable[[State, "np.ndarray | None"], None]


@dataclass(frozen=True)
class CompiledRegion:
    ops: tuple                  # closures, in order
    arg_slots: tuple            # the entry block's arguments
    terminator: str             # op name of the terminator ('' when the block has none)
    yield_slots: tuple          # the terminator's operands


def run_region(region: CompiledRegion, state: State, mask) -> None:
    for run in region.ops:
        run(state, mask)


class KernelCompiler:
    """Compiles the ops of one function; owns the name -> slot map of its SSA values."""

    def __init__(self, module: ParsedModule, handlers: dict[str, Callable]):
        self.module = module
        self.handlers = handlers
        self.slots: dict[str, int] = {}
        self.used: set[str] = set()

    @property
    def slot_count(self) -> int:
        return len(self.slots)

    def error(self, op: Operation, message: str) -> InterpreterError:
        return InterpreterError(f"{self.describe(op)}: {message}")

    def describe(self, op: Operation) -> str:
        """'op.name (line N of the interpreter IR, "file":L:C)', the prefix of every message about op."""
        return f"{op.name} ({self.module.location(op)})"

    def define(self, name: str) -> int:
        self.slots[name] = len(self.slots)
        return self.slots[name]

    def use(self, name: str, op: Operation) -> int:
        if name not in self.slots:
            raise self.error(op, f"uses {name}, which is not defined before it")
        return self.slots[name]

    def operands(self, op: Operation) -> list[int]:
        return [self.use(name, op) for name in op.operands]

    def results(self, op: Operation) -> list[int]:
        return [self.define(name) for name in op.results]

    def result(self, op: Operation) -> int:
        if len(op.results) != 1:
            raise self.error(op, f"expected one result, found {len(op.results)}")
        return self.define(op.results[0])

    def attr(self, op: Operation, name: str):
        if name not in op.attributes:
            raise self.error(op, f"missing attribute {name!r}")
        return op.attributes[name]

    def int_attr(self, op: Operation, name: str) -> int:
        value = self.attr(op, name)
        return int(getattr(value, "value", value))

    def attr_text(self, op: Operation, name: str) -> str:
        """An attribute as the IR spells it ('' when absent): dialect attributes are kept as text."""
        value = op.attributes.get(name)
        return "" if value is None else getattr(value, "text", str(value))

    def enum_attr(self, op: Operation, name: str) -> str | None:
        """The word of a dialect enum attribute (#nvvm.mma_layout<row>: row); None when absent."""
        found = ENUM_WORD.search(self.attr_text(op, name))
        return found.group(1) if found else None

    def compile_function_body(self, region: Region, op: Operation) -> CompiledRegion:
        self.used = {name for inner in _walk_region(region) for name in inner.operands}
        return self.compile_region(region, op)

    def compile_region(self, region: Region, op: Operation) -> CompiledRegion:
        if not region.blocks:
            return CompiledRegion((), (), "", ())
        if len(region.blocks) > 1:
            raise self.error(op, "has a region with several blocks: the interpreter runs structured (scf) "
                                 "control flow only; interpret the IR before convert-scf-to-cf")
        block = region.blocks[0]
        arg_slots = tuple(self.define(name) for name, _ in block.args)
        ops = block.ops
        terminator, yields = "", ()
        if ops and ops[-1].name in TERMINATORS:
            terminator = ops[-1].name
            ops = ops[:-1]
        dead = _dead_after(block, ops, block.ops[-1] if terminator else None)
        closures = tuple(self.compile_op(inner, names) for inner, names in zip(ops, dead))
        if terminator:  # its operands are defined by the ops before it
            yields = tuple(self.operands(block.ops[-1]))
        return CompiledRegion(closures, arg_slots, terminator, yields)

    def compile_op(self, op: Operation, dead: tuple) -> Closure:
        """The closure of `op`, which clears the slots of the values named `dead` after running."""
        if op.name in TERMINATORS:
            raise self.error(op, "a terminator in the middle of a block is not supported")
        handler = self.handlers.get(op.name)
        if handler is None:
            raise self.error(op, "the CPU interpreter cannot run this op (see "
                                 "fmha_mlir.runtime.interp.supported_ops())")
        run = handler(op, self)
        return _guard(run, self.describe(op), tuple(self.slots[name] for name in dead))


def _walk_region(region: Region):
    for block in region.blocks:
        for op in block.ops:
            yield op
            for inner in op.regions:
                yield from _walk_region(inner)


def _uses(op: Operation):
    """The values op uses, itself or in its regions."""
    yield from op.operands
    for region in op.regions:
        for inner in _walk_region(region):
            yield from inner.operands


def _dead_after(block, ops, terminator) -> list[tuple]:
    """Per op of the block: the values defined in this block (arguments and results) that no later op
    uses, nor the terminator."""
    last = {}
    for i, op in enumerate(ops):
        for name in _uses(op):
            last[name] = i
    if terminator is not None:
        for name in _uses(terminator):
            last[name] = len(ops)
    dead = [[r for r in op.results if r not in last] for op in ops]
    here = {name for name, _ in block.args} | {r for op in ops for r in op.results}
    for name, i in last.items():
        if i < len(ops) and name in here:
            dead[i].append(name)
    return [tuple(names) for names in dead]


def _guard(run: Closure, what: str, dead: tuple) -> Closure:
    """Report a NumPy failure inside an op as an InterpreterError naming the op; clear `dead` slots."""

    def guarded(state, mask):
        try:
            run(state, mask)
        except InterpreterError:
            raise
        except (ValueError, IndexError, TypeError, OverflowError) as exc:
            raise InterpreterError(f"{what}: {type(exc).__name__}: {exc}") from exc
        env = state.env
        for slot in dead:
            env[slot] = None

    return guarded
