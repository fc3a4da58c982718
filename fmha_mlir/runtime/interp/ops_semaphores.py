"""fmha.semaphore_wait and fmha.semaphore_signal: work-groups that take turns on an i32 counter in global
memory (deterministic dQ, docs/design/accumulation.md).

A kernel with a wait runs every work-group's roles as coroutines of one launch (roles.Baton), so a wait
suspends its work-group until another signals; when no work-group can go on, the launch deadlocks and
the error names the wait, the counter and what it holds. A wait that passes on the signal of a
work-group with a higher linear block id is an error too: the GPU dispatches work-groups in that order,
and with more of them than fit at once the signaller may never start. Global memory is one NumPy array
here, so what a signal releases is visible at once; the order is what the interpreter checks: a signal
publishes the signalling thread's completed bulk reduces, and a reduce-add onto what another
work-group's unpublished reduces wrote is an error (reduce_order.py), since on the GPU the two adds
could land in either order.
"""
from __future__ import annotations

import numpy as np

from .compiler import KernelCompiler
from .errors import InterpreterError
from .memory import atomic, flat_index
from .parser import Operation

WAIT, SIGNAL = "fmha.semaphore_wait", "fmha.semaphore_signal"


def compile_semaphore_wait(op: Operation, cc: KernelCompiler):
    value_slot, mem_slot, *index_slots = cc.operands(op)
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        mem = env[mem_slot]
        lanes = g.executing(mask)
        if not lanes.size:
            return
        at = np.broadcast_to(flat_index(mem, [env[i] for i in index_slots], mask, g, what), (g.lanes,))[lanes]
        want = np.broadcast_to(env[value_slot], (g.lanes,))[lanes]

        def ready() -> bool:
            return bool((mem.storage[at] == want).all())

        if st.scheduler is None:   # run_kernel gives every kernel with a semaphore a scheduler
            raise InterpreterError(f"{what}: waits outside a launch that interleaves work-groups")
        if not ready():
            def describe() -> str:
                lane = int(lanes[int(np.argmax(mem.storage[at] != want))])
                i = int(np.flatnonzero(lanes == lane)[0])
                return (f"{what}: deadlock: {g.describe(lane)} waits for its semaphore to hold {int(want[i])}; "
                        f"it holds {int(mem.storage[at[i]])} and no work-group that could signal it can go on")

            st.scheduler.block(ready, describe, on_others=True)
        _check_dispatch_order(st.scheduler.baton.signallers, mem, at, lanes, g, what)

    return run


def _check_dispatch_order(signallers: dict, mem, at: np.ndarray, lanes: np.ndarray, g, what: str) -> None:
    """The GPU dispatches work-groups in linear block-id order and runs only so many at once: a wait for a
    signal from a work-group dispatched later can wait for one that never starts. So the signal a wait
    passed on must come from a work-group with a lower linear id."""
    for lane, element in zip(lanes.tolist(), at.tolist()):
        signaller = signallers.get((id(mem.storage), element))
        waiter = g.work_group(lane)
        if signaller is not None and signaller >= waiter:
            raise InterpreterError(f"{what}: {g.describe(lane)} (work-group {waiter}) passed on a signal of work-group "
                                   f"{signaller}, which the GPU dispatches after it: with more work-groups than fit at "
                                   "once that wait never ends; take turns in block-id order")


def compile_semaphore_signal(op: Operation, cc: KernelCompiler):
    mem_slot, *index_slots = cc.operands(op)
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        lanes, sync = g.executing(mask), st.workgroup.hopper
        if sync is not None:   # a release: the bulk groups completed so far are published (reduce_order.py)
            sync.bulk_publish(lanes)
        mem, indices = env[mem_slot], [env[i] for i in index_slots]
        atomic(mem, indices, np.int32(1), "addi", mask, g, None, False, what)
        if st.scheduler is not None:   # which work-group signalled each element last
            at = np.broadcast_to(flat_index(mem, indices, mask, g, what), (g.lanes,))
            for lane in lanes.tolist():
                st.scheduler.baton.signallers[id(mem.storage), int(at[lane])] = g.work_group(lane)

    return run


HANDLERS = {WAIT: compile_semaphore_wait, SIGNAL: compile_semaphore_signal}
