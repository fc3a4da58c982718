"""Structured control flow under SIMT masks: scf.for, scf.if, scf.while, scf.execute_region.

Uniform conditions and bounds run like ordinary Python control flow. Per-lane ones run every path some
lane takes, each under the mask of its lanes, and merge loop-carried values and results per lane.
"""
from __future__ import annotations

import numpy as np

from .compiler import KernelCompiler, run_region
from .errors import InterpreterError
from .parser import Operation
from .types import element_type, vector_rank
from .values import lane_select, merge, zeros_of


def compile_for(op: Operation, cc: KernelCompiler):
    lb, ub, step, *inits = cc.operands(op)
    body = cc.compile_region(op.regions[0], op)
    iv_slot, carried = body.arg_slots[0], body.arg_slots[1:]
    yields = body.yield_slots
    outs = cc.results(op)
    vranks = [vector_rank(t) for t in op.result_types]
    iv_dtype = element_type(op.operand_types[0]).dtype
    what = cc.describe(op)

    def run(st, mask):
        env = st.env
        lo, hi, s = env[lb], env[ub], env[step]
        values = [env[i] for i in inits]
        if np.ndim(lo) == np.ndim(hi) == np.ndim(s) == 0:
            if s <= 0:
                raise InterpreterError(f"{what}: step {int(s)} is not positive")
            for iv in range(int(lo), int(hi), int(s)):
                env[iv_slot] = iv_dtype.type(iv)
                for slot, value in zip(carried, values):
                    env[slot] = value
                for inner in body.ops:
                    inner(st, mask)
                values = [env[y] for y in yields]
        else:
            values = _per_lane_for(st, mask, lo, hi, s, values)
        for slot, value in zip(outs, values):
            env[slot] = value

    def _per_lane_for(st, mask, lo, hi, s, values):
        env = st.env
        if np.any((s <= 0) if mask is None else (np.broadcast_to(s <= 0, mask.shape) & mask)):
            raise InterpreterError(f"{what}: a lane has a non-positive step")
        trips = np.maximum(-(-(hi - lo) // np.where(s > 0, s, 1)), 0)
        trips = np.broadcast_to(trips, (st.grid.lanes,))
        if mask is not None:
            trips = np.where(mask, trips, 0)
        for k in range(int(trips.max(initial=0))):
            active = trips > k
            env[iv_slot] = (lo + k * s).astype(iv_dtype)
            for slot, value in zip(carried, values):
                env[slot] = value
            run_region(body, st, active)
            values = [merge(active, env[y], old, vr) for y, old, vr in zip(yields, values, vranks)]
        return values

    return run


def compile_if(op: Operation, cc: KernelCompiler):
    (cond,) = cc.operands(op)
    then = cc.compile_region(op.regions[0], op)
    other = cc.compile_region(op.regions[1], op) if len(op.regions) > 1 else None
    outs = cc.results(op)
    types = op.result_types
    vranks = [vector_rank(t) for t in types]

    def branch(region, st, mask):
        run_region(region, st, mask)
        return [st.env[y] for y in region.yield_slots]

    def run(st, mask):
        env = st.env
        c = env[cond]
        if np.ndim(c) == 0:
            region = then if c else other
            values = branch(region, st, mask) if region is not None else []
        else:
            then_mask = c if mask is None else mask & c
            else_mask = ~c if mask is None else mask & ~c
            then_values = branch(then, st, then_mask) if then_mask.any() else None
            else_values = branch(other, st, else_mask) if other is not None and else_mask.any() else None
            if then_values is not None and else_values is not None:
                values = [lane_select(c, a, b, vr) for a, b, vr in zip(then_values, else_values, vranks)]
            else:  # one side ran (or none: no executing lane will read the results)
                values = then_values or else_values or [zeros_of(t) for t in types]
        for slot, value in zip(outs, values):
            env[slot] = value

    return run


def compile_while(op: Operation, cc: KernelCompiler):
    inits = cc.operands(op)
    before = cc.compile_region(op.regions[0], op)
    after = cc.compile_region(op.regions[1], op)
    outs = cc.results(op)
    vranks = [vector_rank(t) for t in op.result_types]
    cond_slot, forwarded = before.yield_slots[0], before.yield_slots[1:]

    def run(st, mask):
        env = st.env
        values = [env[i] for i in inits]
        active = mask
        results = [None] * len(outs)
        while True:
            for slot, value in zip(before.arg_slots, values):
                env[slot] = value
            run_region(before, st, active)
            c = env[cond_slot]
            fwd = [env[f] for f in forwarded]
            leaving = ~c if active is None else active & ~c
            results = [merge(leaving, new, old, vr) for new, old, vr in zip(fwd, results, vranks)]
            active = c if active is None else active & c
            if not np.any(active):
                break
            if np.ndim(active) == 0:
                active = mask
            for slot, value in zip(after.arg_slots, fwd):
                env[slot] = value
            run_region(after, st, active)
            values = [env[y] for y in after.yield_slots]
        for slot, value in zip(outs, results):
            env[slot] = value

    return run


def compile_execute_region(op: Operation, cc: KernelCompiler):
    body = cc.compile_region(op.regions[0], op)
    outs = cc.results(op)

    def run(st, mask):
        run_region(body, st, mask)
        for slot, y in zip(outs, body.yield_slots):
            st.env[slot] = st.env[y]

    return run


HANDLERS = {
    "scf.for": compile_for,
    "scf.if": compile_if,
    "scf.while": compile_while,
    "scf.execute_region": compile_execute_region,
}
