"""fmha.semaphore_wait / fmha.semaphore_signal in the interpreter (runtime/interp/ops_semaphores.py): work-
groups that take turns run interleaved, in a random order under random atomic order, so a kernel whose
turns are right gives one result for every seed and a kernel without them does not; a wait nobody can
satisfy is a deadlock naming the wait; a bulk reduce-add onto another work-group's writes that its thread
had not completed and signalled is reported (reduce_order.py; end to end in test_warp_roles.py)."""
from __future__ import annotations

import numpy as np
import pytest

from fmha_mlir.runtime.interp.errors import InterpreterError

pytest.importorskip("fmha_mlir.mlir")

GROUPS = 6


def _turns(wait: bool, rank: str = "arith.subi %b, %c0") -> str:
    """Work-group b (block x) computes acc = acc * 3 + (b + 1) in f32 (the order shows in the result), in
    turn: it waits until the counter holds its rank (`rank`, of %b, %c0, %last), block 0 first."""
    body = f"""
    %rank = {rank} : index
    %want = arith.index_cast %rank : index to i32
    "fmha.semaphore_wait"(%want, %sem, %c0) : (i32, memref<1xi32>, index) -> ()""" if wait else ""
    return f"""
gpu.module @m {{
  gpu.func @k(%acc: memref<1xf32>, %sem: memref<1xi32>) kernel {{
    %t = gpu.thread_id x
    %b = gpu.block_id x
    %c0 = arith.constant 0 : index
    %n = gpu.grid_dim x
    %c1 = arith.constant 1 : index
    %last = arith.subi %n, %c1 : index
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {{{body}
      %old = memref.load %acc[%c0] : memref<1xf32>
      %three = arith.constant 3.0 : f32
      %b1 = arith.addi %b, %c1 : index
      %bi = arith.index_cast %b1 : index to i32
      %bf = arith.sitofp %bi : i32 to f32
      %scaled = arith.mulf %old, %three : f32
      %new = arith.addf %scaled, %bf : f32
      memref.store %new, %acc[%c0] : memref<1xf32>
      "fmha.semaphore_signal"(%sem, %c0) : (memref<1xi32>, index) -> ()
    }}
    gpu.return
  }}
}}
"""


def _run(text: str, seed: int, order: str = "random") -> tuple[float, int]:
    from fmha_mlir.runtime.interp import Interpreter
    from interp_support import generic

    acc, sem = np.zeros(1, np.float32), np.zeros(1, np.int32)
    Interpreter(generic(text), 32, atomic_order=order, seed=seed).run_kernel(
        "k", [acc, sem], (GROUPS, 1, 1), (32, 1, 1))
    return float(acc[0]), int(sem[0])


def _in_block_order() -> float:
    acc = np.float32(0)
    for b in range(GROUPS):
        acc = acc * np.float32(3) + np.float32(b + 1)
    return float(acc)


def test_work_groups_take_their_turns_in_every_start_order():
    results = {_run(_turns(True), seed) for seed in range(6)} | {_run(_turns(True), 0, "sequential")}
    assert results == {(_in_block_order(), GROUPS)}


def test_without_the_wait_the_start_order_shows():
    # the same kernel with its signals but no wait: the groups run in the order they start
    results = {_run(_turns(False) + "", seed)[0] for seed in range(6)}
    assert len(results) > 1


def test_a_wait_for_a_turn_that_never_comes_is_a_deadlock_naming_it():
    # ranks from 1: the first turn (0) is nobody's
    with pytest.raises(InterpreterError, match=r"fmha\.semaphore_wait .*: deadlock: lane \d+ \(block \(\d, 0, 0\), "
                                               r"thread \(0, 0, 0\)\) waits for its semaphore to hold \d; it holds 0"):
        _run(_turns(True, rank="arith.addi %b, %c1"), 0)


def test_turns_against_the_dispatch_order_are_reported():
    # the last block first: each block waits for one the GPU dispatches after it
    with pytest.raises(InterpreterError, match=r"fmha\.semaphore_wait .*: lane \d+ \(block \(4, 0, 0\), .*\) "
                                               r"\(work-group 4\) passed on a signal of work-group 5, which the GPU "
                                               r"dispatches after it"):
        _run(_turns(True, rank="arith.subi %last, %b"), 0, "sequential")


class _Writer:
    """A thread's bulk groups as HopperSync counts them: committed, completed, published at its last signal."""

    def __init__(self):
        self.committed = self.completed = self.published = 0

    def bulk_group(self, lane: int) -> int:
        return self.committed

    def bulk_published(self, lane: int) -> int:
        return self.published


def test_a_reduce_add_may_land_only_on_writes_published_to_it():
    """ReduceOrder's release model: work-group 1 may add onto work-group 0's elements once 0's group there
    completed and 0 signalled after that; its own earlier writes, and a group 0 still has in flight over
    other elements, do not matter."""
    from fmha_mlir.runtime.interp.reduce_order import ReduceOrder

    order, tensor = ReduceOrder(), np.zeros((4, 8), np.float32)
    first, second = _Writer(), _Writer()
    order.reduce(tensor, (slice(0, 2), slice(0, 8)), first, 0, 0, "add")   # group 0: rows 0-1
    first.committed = 1
    order.reduce(tensor, (slice(2, 4), slice(0, 8)), first, 0, 0, "add")   # group 1: rows 2-3, in flight
    first.committed, first.completed = 2, 1
    with pytest.raises(InterpreterError, match="work-group 1 reduce-adds onto elements that work-group 0's bulk "
                                               "group 0 wrote.*either order"):
        order.reduce(tensor, (slice(0, 1), slice(0, 8)), second, 0, 1, "add")   # completed, not signalled
    first.published = first.completed   # the signal: group 0 published, group 1 still in flight
    order.reduce(tensor, (slice(0, 2), slice(0, 8)), second, 0, 1, "add")
    order.reduce(tensor, (slice(0, 2), slice(0, 8)), second, 0, 1, "add")   # onto its own writes
    with pytest.raises(InterpreterError, match="group 1 wrote"):
        order.reduce(tensor, (slice(3, 4), slice(0, 2)), second, 0, 1, "add")
