"""Warp-specialised kernels: each role (a range of threads of every work-group, e.g. a producer warpgroup
and a consumer warpgroup) runs the kernel body as its own resumable coroutine over its lanes, so that a
producer can wait on an "empty" barrier that only a consumer, later in program order, arrives at. A
kernel whose work-groups take turns (fmha.semaphore_wait) runs every work-group's roles as coroutines of
one launch (Baton), so a work-group can wait for another that has not run yet.

A kernel declares its roles with the gpu.func attribute `fmha.roles` (pairs of first thread, end
thread; passes/hopper_sync.declare_roles); without it the body runs in lockstep as every other kernel.
Each role runs under its own lane mask and value slots, sharing the launch's memories. One role runs
at a time (a baton over Python threads, so a handler can suspend in the middle of a region): it runs
until it must wait (an mbarrier phase, a named barrier, gpu.barrier), then the next role that can make
progress runs. When no role can, the kernel deadlocks, reported at the wait that cannot pass.
"""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from .errors import InterpreterError
from .reduce_order import BulkReads, ReduceOrder

ROLES_ATTRIBUTE = "fmha.roles"


class _Abort(BaseException):
    """Unwinds a unit's thread when another unit failed (not an Exception: op guards let it through)."""


class Baton:
    """Units (a role of a work-group chunk) that run one at a time, each on its own Python thread so that
    a handler can suspend in the middle of a region: a unit runs until it must wait, then the baton goes to
    the next unit, in the order they were added, that can make progress. When none can, the launch
    deadlocks, reported at the first suspended unit's wait. One chunk's roles share a baton; a kernel whose
    work-groups wait on each other (fmha.semaphore_wait) puts every work-group's roles on one."""

    def __init__(self, reduce_order: ReduceOrder | None = None, bulk_reads: BulkReads | None = None):
        self._cv = threading.Condition()
        self._turn = 0
        self._bodies: list[Callable[[], None]] = []
        self._done: list[bool] = []
        self._waiting: list[tuple | None] = []   # (ready, describe, on_others) of a suspended unit
        self._failure: BaseException | None = None
        self._local = threading.local()
        # semaphore element (storage id, index) -> the linear id of the work-group that last signalled it
        self.signallers: dict[tuple[int, int], int] = {}
        # where work-groups take turns: the order of their bulk reduce-adds (reduce_order.py)
        self.reduce_order = reduce_order
        # where work-groups wait on each other: their loads of what others' bulk ops wrote (reduce_order.py)
        self.bulk_reads = bulk_reads

    def add(self, body: Callable[[], None]) -> None:
        self._bodies.append(body)
        self._done.append(False)
        self._waiting.append(None)

    def run(self) -> None:
        threads = [threading.Thread(target=self._unit, args=(i,), daemon=True) for i in range(len(self._bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self._failure is not None:
            raise self._failure

    def _unit(self, index: int) -> None:
        self._local.index = index
        try:
            with self._cv:
                self._await_turn(index)
            self._bodies[index]()
            with self._cv:
                self._done[index] = True
                if not self._pass_on(index):
                    self._deadlock()
        except _Abort:
            pass
        except BaseException as exc:   # the first failure ends every unit
            with self._cv:
                if self._failure is None:
                    self._failure = exc
                self._cv.notify_all()

    # --- the baton (called with the condition held) ---------------------------------------------

    def _await_turn(self, index: int) -> None:
        self._cv.wait_for(lambda: self._turn == index or self._failure is not None)
        if self._failure is not None:
            raise _Abort()

    def _runnable(self, index: int) -> bool:
        waiting = self._waiting[index]
        return not self._done[index] and (waiting is None or waiting[0]())

    def _deadlock(self) -> None:
        """No unit can make progress: the first suspended one's wait is the error, a wait on another
        work-group first (the others wait on it)."""
        waits = [w for w in self._waiting if w is not None]
        describe = next((w[1] for w in waits if w[2]), waits[0][1])
        raise InterpreterError(describe() + " (roles: no role can make progress)")

    def _pass_on(self, index: int) -> bool:
        """Give the baton to the next unit that can make progress; False if none can."""
        count = len(self._bodies)
        for step in range(1, count + 1):
            other = (index + step) % count
            if other != index and self._runnable(other):
                self._turn = other
                self._cv.notify_all()
                return True
        return all(self._done)

    def block(self, ready: Callable[[], bool], describe: Callable[[], str], on_others: bool = False) -> None:
        """Suspend the running unit until `ready()`; a deadlock (no unit can progress) is an error.
        `on_others`: the wait is for another work-group (a semaphore), reported first in a deadlock."""
        index = self._local.index
        with self._cv:
            self._waiting[index] = (ready, describe, on_others)
            while not ready():
                if not self._pass_on(index):
                    self._deadlock()
                self._await_turn(index)
            self._waiting[index] = None


class RoleScheduler:
    """The roles of one launch chunk on a baton (its own, or one shared with other chunks); `run(body)`
    runs `body(role_index, mask)` for each role, `add(body)` only puts them on a shared baton."""

    def __init__(self, grid, ranges: list[tuple[int, int]], what: str, baton: Baton | None = None):
        self.grid = grid
        thread = grid.thread_linear
        self.masks = [(thread >= first) & (thread < end) for first, end in ranges]
        covered = np.sum(self.masks, axis=0)
        if (covered != 1).any():
            lane = int(np.argmax(covered != 1))
            raise InterpreterError(f"{what}: {ROLES_ATTRIBUTE} {ranges} gives {grid.describe(lane)} "
                                   f"{int(covered[lane])} roles; each thread has exactly one")
        self.baton = baton or Baton()
        self._arrivals: dict[int, np.ndarray] = {}      # named barrier id -> arrivals per work-group
        self._generation: dict[int, np.ndarray] = {}    # named barrier id -> completed rounds per work-group

    def add(self, body: Callable[[int, np.ndarray], None]) -> None:
        for index, mask in enumerate(self.masks):
            self.baton.add(lambda index=index, mask=mask: body(index, mask))

    def run(self, body: Callable[[int, np.ndarray], None]) -> None:
        self.add(body)
        self.baton.run()

    # --- what handlers call ------------------------------------------------------------------------

    def block(self, ready: Callable[[], bool], describe: Callable[[], str], on_others: bool = False) -> None:
        """Suspend the running role until `ready()` (Baton.block)."""
        self.baton.block(ready, describe, on_others)

    def named_barrier(self, barrier: int, threads: int, lanes: np.ndarray, what: str) -> None:
        """bar.sync: the executing lanes arrive at `barrier` of their work-groups and wait until `threads`
        threads of each have (gpu.barrier is barrier 0 over the whole work-group)."""
        g = self.grid
        arrivals = self._arrivals.setdefault(barrier, np.zeros(g.groups, np.int64))
        generation = self._generation.setdefault(barrier, np.zeros(g.groups, np.int64))
        counts = np.bincount(g.group_local[lanes], minlength=g.groups)
        groups = np.flatnonzero(counts)
        mine = generation[groups].copy()
        arrivals += counts
        if (arrivals > threads).any():
            w = int(np.argmax(arrivals > threads))
            raise InterpreterError(f"{what}: {int(arrivals[w])} threads of work-group {g.first_group + w} reach "
                                   f"barrier {barrier}, which expects {threads}")
        full = arrivals >= threads
        generation[full] += 1
        arrivals[full] = 0

        def describe() -> str:
            w = groups[int(np.argmax(generation[groups] == mine))]
            return (f"{what}: deadlock: barrier {barrier} of work-group {g.first_group + int(w)} waits for "
                    f"{threads} threads, {int(arrivals[w])} arrived")

        self.block(lambda: bool((generation[groups] > mine).all()), describe)


def role_ranges(value) -> list[tuple[int, int]] | None:
    """The (first, end) thread pairs of a parsed `fmha.roles` attribute (a flat i32 array), or None."""
    if value is None:
        return None
    flat = [int(v) for v in value]
    if len(flat) % 2 or not flat:
        raise InterpreterError(f"{ROLES_ATTRIBUTE} must list (first, end) thread pairs, got {flat}")
    return list(zip(flat[::2], flat[1::2]))
