"""Thread / block / lane ids and sizes (gpu, rocdl, nvvm spellings), gpu.barrier and
gpu.dynamic_shared_memory.

gpu.barrier orders nothing itself, because all lanes run in lockstep: every op finishes for every lane
of every work-group before the next op starts, so all memory writes issued before a barrier are
visible to all reads after it. What lockstep cannot show are races *within* a phase (two lanes touching
one element of workgroup memory without a barrier between): they behave as if ordered. So the barrier
starts a new epoch of the race detector (workgroup.py), which reports such races, and checks its own
rule: it must be reached by all threads of a work-group or by none.
"""
from __future__ import annotations

import numpy as np

from .compiler import KernelCompiler
from .errors import InterpreterError
from .parser import Operation
from .types import MemRefType, element_type

_DIMS = {"x": 0, "y": 1, "z": 2}


def _id_handler(source: str, dim: int | None = None):
    """A handler producing a per-launch value: source names a LaneGrid array or a launch size."""

    def compile_op(op: Operation, cc: KernelCompiler):
        d = dim if dim is not None else _DIMS[cc.attr(op, "dimension").keyword]
        out = cc.result(op)
        dtype = element_type(op.result_types[0]).dtype

        def run(st, mask):
            g = st.grid
            if source == "thread_id":
                value = g.thread_id[d]
            elif source == "block_id":
                value = g.block_id[d]
            elif source == "block_dim":
                value = g.block[d]
            elif source == "grid_dim":
                value = g.grid[d]
            elif source == "global_id":
                value = g.block_id[d] * g.block[d] + g.thread_id[d]
            elif source == "lane_id":
                value = g.lane_in_wave
            elif source == "subgroup_size":
                value = g.wave_size
            elif source == "subgroup_id":
                value = g.thread_linear // g.wave_size
            else:  # num_subgroups
                value = -(-g.group_threads // g.wave_size)
            st.env[out] = np.asarray(value).astype(dtype) if np.ndim(value) else dtype.type(value)

        return run

    return compile_op


def compile_barrier(op: Operation, cc: KernelCompiler):
    what = cc.describe(op)

    def check(g, mask):
        per_group = mask.reshape(g.groups, g.group_threads)
        partial = per_group.any(axis=1) & ~per_group.all(axis=1)
        if partial.any():
            group = int(np.argmax(partial))
            lane = group * g.group_threads + int(np.argmin(per_group[group]))
            raise InterpreterError(f"{what}: reached by only some threads of a work-group (divergent barrier); "
                                   f"{g.describe(lane)} does not reach it")

    def run(st, mask):
        if st.scheduler is not None:   # roles meet here: every thread of the work-group, from every role
            lanes = st.grid.executing(mask)
            st.scheduler.named_barrier(0, st.grid.group_threads, lanes, what)
        elif mask is not None:
            check(st.grid, mask)
        st.workgroup.barrier(mask, what)

    return run


def compile_dynamic_shared_memory(op: Operation, cc: KernelCompiler):
    """The launch's dynamic shared memory (run_kernel's shared_bytes per work-group) as memref<?xi8>;
    every execution returns the same bytes."""
    out = cc.result(op)
    t = op.result_types[0]
    if not (isinstance(t, MemRefType) and t.elem.name == "i8" and t.shape == (None,)):
        raise cc.error(op, f"expected a result of type memref<?xi8, workgroup>, got {t}")

    def run(st, mask):
        st.env[out] = st.workgroup.dynamic()

    return run


def _ids(prefix: str, source: str):
    """Handlers for the per-dimension spellings prefix.x / .y / .z of one id or size."""
    return {f"{prefix}.{d}": _id_handler(source, i) for d, i in _DIMS.items()}


HANDLERS = {
    "gpu.thread_id": _id_handler("thread_id"),
    "gpu.block_id": _id_handler("block_id"),
    "gpu.block_dim": _id_handler("block_dim"),
    "gpu.grid_dim": _id_handler("grid_dim"),
    "gpu.global_id": _id_handler("global_id"),
    "gpu.lane_id": _id_handler("lane_id", 0),
    "gpu.subgroup_size": _id_handler("subgroup_size", 0),
    "gpu.subgroup_id": _id_handler("subgroup_id", 0),
    "gpu.num_subgroups": _id_handler("num_subgroups", 0),
    "gpu.barrier": compile_barrier,
    "gpu.dynamic_shared_memory": compile_dynamic_shared_memory,
    **_ids("rocdl.workitem.id", "thread_id"),
    **_ids("rocdl.workgroup.id", "block_id"),
    **_ids("rocdl.workgroup.dim", "block_dim"),
    **_ids("rocdl.grid.dim", "grid_dim"),
    **_ids("nvvm.read.ptx.sreg.tid", "thread_id"),
    **_ids("nvvm.read.ptx.sreg.ctaid", "block_id"),
    **_ids("nvvm.read.ptx.sreg.ntid", "block_dim"),
    **_ids("nvvm.read.ptx.sreg.nctaid", "grid_dim"),
    "nvvm.read.ptx.sreg.laneid": _id_handler("lane_id", 0),
    "nvvm.read.ptx.sreg.warpsize": _id_handler("subgroup_size", 0),
}
