"""The public entry point: run gpu.func kernels of generic-form MLIR text on the CPU."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import (ops_amdgpu, ops_arith, ops_crosslane, ops_fmha, ops_gpu, ops_hopper, ops_memory, ops_nvgpu, ops_scf,
               ops_semaphores, ops_vector)
from .compiler import CompiledRegion, KernelCompiler, State, run_region
from .errors import InterpreterError
from .hopper import TensorMap
from .hopper_sync import HopperSync
from .roles import ROLES_ATTRIBUTE, Baton, RoleScheduler, role_ranges
from .lanes import LaneGrid
from .memory import allocate, wrap_array
from .reduce_order import ORDERED_REDUCES, BulkReads, ReduceOrder
from .parser import Operation, ParsedModule, parse_module, typed_scalar
from .types import MemRefType, ScalarType
from .workgroup import WorkgroupMemory

HANDLERS = {**ops_arith.HANDLERS, **ops_memory.HANDLERS, **ops_vector.HANDLERS, **ops_scf.HANDLERS,
            **ops_gpu.HANDLERS, **ops_crosslane.HANDLERS, **ops_fmha.HANDLERS, **ops_nvgpu.HANDLERS,
            **ops_amdgpu.HANDLERS, **ops_hopper.HANDLERS, **ops_semaphores.HANDLERS}
ATOMIC_ORDERS = ("sequential", "random")
TENSOR_MAP_TYPES = ("!llvm.ptr",)   # how a kernel declares a by-value tensor-map parameter
DEFAULT_MAX_LANES = 1 << 16
# Workgroup memory of one chunk, all work-groups together: bounds the race detector's shadow (3 bytes
# per byte) when kernels use much shared memory.
MAX_CHUNK_WORKGROUP_BYTES = 1 << 23


def supported_ops() -> list[str]:
    """Names of the ops the interpreter runs (besides the scf/gpu terminators)."""
    return sorted(HANDLERS)


@dataclass(frozen=True)
class CompiledKernel:
    name: str
    arg_types: tuple
    workgroup_types: tuple       # workgroup memory attributions: one copy per work-group
    workgroup_names: tuple       # their block argument names, for messages
    private_types: tuple         # private memory attributions: one copy per lane
    body: CompiledRegion
    slots: int
    known_block_size: tuple | None
    hopper: bool                 # has mbarrier / TMA / wgmma ops: its chunks keep a HopperSync
    roles: list | None           # (first, end) thread ranges run as coroutines (roles.py); None: lockstep
    semaphores: bool             # work-groups wait for others (fmha.semaphore_*): they run interleaved
    ordered_reduces: bool        # their bulk reduce-adds go in turns (reduce_order.py checks the order)


class Interpreter:
    """Runs the kernels of one module.

    atomic_order: "sequential" applies each atomic op's lanes in lane order; "random" in a fresh random
    permutation each time (seeded by `seed`), so results that depend on the order of float atomics
    show up as bit differences between runs. max_lanes bounds how many threads run as one NumPy axis
    (the grid is run in chunks of whole work-groups).
    """

    def __init__(self, module_text: str, wave_size: int, atomic_order: str = "sequential", seed: int = 0,
                 max_lanes: int = DEFAULT_MAX_LANES):
        if not isinstance(wave_size, (int, np.integer)) or wave_size <= 0:
            raise InterpreterError(f"wave_size must be a positive integer (got {wave_size!r})")
        if atomic_order not in ATOMIC_ORDERS:
            raise InterpreterError(f"atomic_order must be one of {', '.join(ATOMIC_ORDERS)} (got {atomic_order!r})")
        self.wave_size = int(wave_size)
        self.atomic_order = atomic_order
        self.max_lanes = max_lanes
        self._rng = np.random.default_rng(seed)
        self._module: ParsedModule = parse_module(module_text)
        self._kernels = _find_kernels(self._module)
        self._compiled: dict[str, CompiledKernel] = {}

    def kernel_names(self) -> list[str]:
        return sorted(self._kernels)

    def run_kernel(self, name: str, args: list, grid: tuple, block: tuple, shared_bytes: int = 0) -> None:
        """Run kernel `name` over `grid` work-groups of `block` threads with `shared_bytes` of dynamic
        shared memory per work-group (gpu.dynamic_shared_memory); memref args are updated in place."""
        kernel = self._compile(name)
        grid, block = _dims("grid", grid), _dims("block", block)
        if not isinstance(shared_bytes, (int, np.integer)) or shared_bytes < 0:
            raise InterpreterError(f"shared_bytes must be a non-negative integer (got {shared_bytes!r})")
        if kernel.known_block_size is not None and tuple(kernel.known_block_size) != block:
            raise InterpreterError(f"kernel {name} is compiled for block size {tuple(kernel.known_block_size)} "
                                   f"(known_block_size), launched with {block}")
        values = _bind_args(name, kernel.arg_types, args)
        threads = block[0] * block[1] * block[2]
        groups = grid[0] * grid[1] * grid[2]
        group_bytes = int(shared_bytes) + sum(_bytes(t) for t in kernel.workgroup_types)
        per_chunk = max(1, min(self.max_lanes // threads, MAX_CHUNK_WORKGROUP_BYTES // max(group_bytes, 1)))
        with np.errstate(all="ignore"):
            if kernel.semaphores:
                self._run_interleaved(kernel, grid, block, values, int(shared_bytes))
                return
            for first in range(0, groups, per_chunk):
                lanes = LaneGrid(grid, block, self.wave_size, first, min(per_chunk, groups - first))
                run_role, hopper = self._chunk(kernel, lanes, values, int(shared_bytes))
                if kernel.roles is None:
                    run_role(0, None)
                else:
                    scheduler = RoleScheduler(lanes, kernel.roles, f"kernel {name}")
                    scheduler.run(lambda role, mask: run_role(role, mask, scheduler))
                if hopper is not None:
                    hopper.finish(f"kernel {name}")

    def _run_interleaved(self, kernel: "CompiledKernel", grid: tuple, block: tuple, values: list,
                         shared_bytes: int) -> None:
        """Work-groups that take turns (fmha.semaphore_*): one a chunk, every chunk's roles on one baton, so
        that one can wait for another; under random atomic order they start in a random order (the
        hardware's is not fixed), so a kernel that signals without waiting shows its order in the result."""
        groups, threads = grid[0] * grid[1] * grid[2], block[0] * block[1] * block[2]
        order = self._rng.permutation(groups) if self.atomic_order == "random" else range(groups)
        baton, hoppers = Baton(ReduceOrder() if kernel.ordered_reduces else None,
                               BulkReads() if kernel.hopper else None), []
        for first in order:
            lanes = LaneGrid(grid, block, self.wave_size, int(first), 1)
            run_role, hopper = self._chunk(kernel, lanes, values, shared_bytes)
            scheduler = RoleScheduler(lanes, kernel.roles or [(0, threads)], f"kernel {kernel.name}", baton)
            scheduler.add(lambda role, mask, run_role=run_role, scheduler=scheduler: run_role(role, mask, scheduler))
            hoppers += [hopper] if hopper is not None else []
        baton.run()
        for hopper in hoppers:
            hopper.finish(f"kernel {kernel.name}")

    def _chunk(self, kernel: "CompiledKernel", lanes: LaneGrid, values: list, shared_bytes: int):
        """A chunk's memories, and run_role(role, mask, scheduler) that runs the body over its lanes; with
        the chunk's HopperSync (None for kernels without Hopper ops)."""
        workgroup = WorkgroupMemory(lanes, shared_bytes)
        if kernel.hopper:
            workgroup.hopper = HopperSync(lanes)
        memory = [workgroup.attribution(t, arg) for t, arg in zip(kernel.workgroup_types, kernel.workgroup_names)]
        memory += [allocate(t, lanes.lanes, lanes.lane_index, f"private memory of {kernel.name}")
                   for t in kernel.private_types]

        def run_role(role, mask, scheduler=None):
            state = State(kernel.slots, lanes, self._rng, self.atomic_order, workgroup)
            state.scheduler = scheduler
            for slot, value in zip(kernel.body.arg_slots, values + memory):
                state.env[slot] = value
            run_region(kernel.body, state, mask)

        return run_role, workgroup.hopper

    def _compile(self, name: str) -> CompiledKernel:
        if name not in self._compiled:
            op = self._kernels.get(name)
            if op is None:
                raise InterpreterError(f"no kernel named {name!r}; the module has: "
                                       f"{', '.join(self.kernel_names()) or 'no gpu.func kernels'}")
            self._compiled[name] = _compile_kernel(self._module, op, name)
        return self._compiled[name]


def _find_kernels(module: ParsedModule) -> dict[str, Operation]:
    kernels = {}
    for op in module.walk():
        if op.name == "gpu.func" and op.attributes.get("kernel"):
            kernels[op.attributes.get("sym_name")] = op
    return kernels


def _compile_kernel(module: ParsedModule, op: Operation, name: str) -> CompiledKernel:
    cc = KernelCompiler(module, HANDLERS)
    fn_type = cc.attr(op, "function_type")
    if fn_type.results:
        raise cc.error(op, "kernels return nothing")
    args = op.regions[0].blocks[0].args if op.regions and op.regions[0].blocks else []
    block_args = [t for _, t in args]
    n_in = len(fn_type.inputs)
    n_wg = cc.int_attr(op, "workgroup_attributions") if "workgroup_attributions" in op.attributes else 0
    for t in block_args[n_in:]:
        if not isinstance(t, MemRefType):
            raise cc.error(op, f"memory attribution of type {t} is not a memref")
    body = cc.compile_function_body(op.regions[0], op)
    known = op.attributes.get("known_block_size")
    return CompiledKernel(name, tuple(fn_type.inputs), tuple(block_args[n_in:n_in + n_wg]),
                          tuple(arg for arg, _ in args[n_in:n_in + n_wg]),
                          tuple(block_args[n_in + n_wg:]), body, cc.slot_count,
                          tuple(int(v) for v in known) if known else None,
                          any(inner.name in ops_hopper.HOPPER_OPS for inner in _walk(op)),
                          role_ranges(op.attributes.get(ROLES_ATTRIBUTE)),
                          any(inner.name in ops_semaphores.HANDLERS for inner in _walk(op)),
                          ORDERED_REDUCES in op.attributes)


def _walk(op: Operation):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                yield inner
                yield from _walk(inner)


def _bytes(t: MemRefType) -> int:
    """The bytes of a workgroup attribution, roughly (for chunk sizing; dynamic shapes count 0)."""
    return int(np.prod([n or 0 for n in t.shape], dtype=np.int64)) * t.elem.storage_dtype.itemsize


def _dims(what: str, dims) -> tuple[int, int, int]:
    dims = tuple(dims)
    if len(dims) != 3 or not all(isinstance(d, (int, np.integer)) and d > 0 for d in dims):
        raise InterpreterError(f"{what} must be three positive integers (got {dims!r})")
    return tuple(int(d) for d in dims)


def _bind_args(name: str, types: tuple, args: list) -> list:
    if len(args) != len(types):
        raise InterpreterError(f"kernel {name} takes {len(types)} arguments, got {len(args)}")
    values = []
    for i, (t, arg) in enumerate(zip(types, args)):
        what = f"kernel {name}, argument {i}"
        if isinstance(t, MemRefType):
            values.append(wrap_array(arg, t, what))
        elif isinstance(t, ScalarType):
            if isinstance(arg, np.ndarray) and arg.ndim == 0:
                arg = arg[()]
            if not isinstance(arg, (int, float, bool, np.number, np.bool_)):
                raise InterpreterError(f"{what}: expected a number for {t}, got {type(arg).__name__}")
            values.append(typed_scalar(arg, t))
        elif isinstance(arg, TensorMap) and str(t) in TENSOR_MAP_TYPES:
            values.append(arg)
        else:
            raise InterpreterError(f"{what}: arguments of type {t} are not supported"
                                   + (" (a tensor map: pass a TensorMapArg)" if str(t) in TENSOR_MAP_TYPES else ""))
    return values
