"""Cross-lane ops: gpu.shuffle, amdgpu.dpp, rocdl.readlane / readfirstlane / mbcnt, and the butterfly
all-reduce behind fmha.wave_reduce. Lanes read each other's values inside their wave only.

DPP follows the CDNA (GFX9) wave64 rules: a wave is 4 rows of 16 lanes, a row is 4 banks of 4 lanes.
Each lane reads a source lane chosen by the control; row_mask / bank_mask disable writing whole rows /
banks (those lanes keep `old`); a source lane outside the allowed range, outside the wave, or not
executing is invalid: the lane gets 0 with bound_ctrl, else keeps `old`.
"""
from __future__ import annotations

import numpy as np

from .compiler import KernelCompiler
from .errors import InterpreterError
from .lanes import LaneGrid
from .parser import Operation
from .types import vector_rank
from .values import lane_mask_for, to_lanes


def gather_in_wave(grid: LaneGrid, x, source_lane, valid, vrank: int):
    """Each lane's value of `x` at lane `source_lane` of its wave, where `valid`; own value elsewhere."""
    x = to_lanes(x, grid.lanes, vrank)
    src = grid.wave_base + np.where(valid, source_lane, grid.lane_in_wave)
    return x.take(src, axis=0)


def butterfly_sum(grid: LaneGrid, x, width: int, vrank: int):
    """All-reduce (add) over aligned groups of `width` lanes by xor steps 1, 2, 4, ... (every lane of a
    group ends with bit-identical sums)."""
    li = grid.lane_in_wave
    step = 1
    while step < width:
        src = li ^ step
        x = x + gather_in_wave(grid, x, src, src < grid.wave_len, vrank)
        step *= 2
    return x


def compile_shuffle(op: Operation, cc: KernelCompiler):
    value, offset, width = cc.operands(op)
    out, valid_out = cc.results(op)
    mode = cc.attr(op, "mode").keyword
    vrank = vector_rank(op.operand_types[0])
    what = cc.describe(op)
    key = object()  # this op's entries in the per-chunk cache

    def tables(g, off, w):
        """Global source lane (own lane where invalid) and validity per lane."""
        li = g.lane_in_wave
        segment = li // w * w
        if mode == "xor":
            src = li ^ off
        elif mode == "down":
            src = li + off
        elif mode == "up":
            src = li - off
        else:  # idx: a lane of the own segment
            src = segment + off
        valid = (src >= segment) & (src < segment + w) & (src < g.wave_len)
        return g.wave_base + np.where(valid, src, li), valid

    def run(st, mask):
        env = st.env
        g = st.grid
        w, off = env[width], env[offset]
        uniform = np.ndim(w) == 0 and np.ndim(off) == 0
        entry = (key, int(off), int(w)) if uniform else None
        if entry in st.cache:
            gather, valid = st.cache[entry]
        else:
            if np.any(w <= 0) or np.any(w > g.wave_size):
                raise InterpreterError(f"{what}: width {w} must be in 1..{g.wave_size}")
            gather, valid = tables(g, np.asarray(off).astype(np.int64), np.asarray(w).astype(np.int64))
            if uniform:  # the common case: constant offsets and widths, tables per geometry
                st.cache[entry] = gather, valid
        if mask is not None:  # gpu.shuffle requires its lanes to be active: reading another is undefined
            reads_inactive = mask & valid & ~mask[gather]
            if reads_inactive.any():
                lane = int(np.argmax(reads_inactive))
                raise InterpreterError(f"{what}: {g.describe(lane)} reads a lane that does not execute "
                                       "(a divergent shuffle)")
        env[out] = to_lanes(env[value], g.lanes, vrank).take(gather, axis=0)
        env[valid_out] = valid

    return run


def _dpp_source(kind: str, arg, li):
    """(source lane in the wave, in-range flag) for each lane under DPP control `kind`."""
    row, r = li // 16 * 16, li % 16
    if kind == "quad_perm":
        return (li & ~3) + np.asarray(arg, dtype=np.int64)[li & 3], True
    if kind == "row_shl":
        return li + arg, r + arg < 16
    if kind == "row_shr":
        return li - arg, r - arg >= 0
    if kind == "row_ror":
        return row + (r - arg) % 16, True
    if kind == "row_mirror":
        return row + 15 - r, True
    if kind == "row_half_mirror":
        return (li & ~7) + 7 - (li & 7), True
    if kind == "row_bcast_15":
        return row - 1, li >= 16
    if kind == "row_bcast_31":
        return np.full_like(li, 31), li >= 32
    if kind == "wave_shl":
        return li + 1, True
    if kind == "wave_shr":
        return li - 1, li >= 1
    if kind == "wave_rol":
        return li + 1, "rotate"
    if kind == "wave_ror":
        return li - 1, "rotate"
    raise AssertionError(kind)


_DPP_ARG_RANGE = {"row_shl": (1, 15), "row_shr": (1, 15), "row_ror": (1, 15)}
DPP_KINDS = ("quad_perm", "row_shl", "row_shr", "row_ror", "row_mirror", "row_half_mirror",
             "row_bcast_15", "row_bcast_31", "wave_shl", "wave_shr", "wave_rol", "wave_ror")


def compile_dpp(op: Operation, cc: KernelCompiler):
    old, src = cc.operands(op)
    out = cc.result(op)
    kind = cc.attr(op, "kind").keyword
    if kind not in DPP_KINDS:
        raise cc.error(op, f"DPP control {kind!r} is not supported")
    arg = op.attributes.get("permArgument")
    if kind == "quad_perm":
        arg = [int(getattr(a, "value", a)) for a in arg or ()]
        if len(arg) != 4 or not all(0 <= a < 4 for a in arg):
            raise cc.error(op, f"quad_perm needs 4 lane selectors in 0..3, got {arg}")
    elif kind in _DPP_ARG_RANGE:
        arg = int(getattr(arg, "value", arg))
        lo, hi = _DPP_ARG_RANGE[kind]
        if not lo <= arg <= hi:
            raise cc.error(op, f"{kind} amount {arg} is outside {lo}..{hi}")
    row_mask = cc.int_attr(op, "row_mask") if "row_mask" in op.attributes else 0xF
    bank_mask = cc.int_attr(op, "bank_mask") if "bank_mask" in op.attributes else 0xF
    bound_ctrl = bool(op.attributes.get("bound_ctrl", False))
    vrank = vector_rank(op.result_types[0])

    key = object()  # this op's entry in the per-chunk cache

    def tables(g):
        """Global source lane, whether that source is valid, and whether the row / bank is enabled, per
        lane: they depend on the geometry only, so they are cached per chunk."""
        li = g.lane_in_wave
        source, in_range = _dpp_source(kind, arg, li)
        if isinstance(in_range, str):  # wave rotates wrap around the (possibly partial) wave
            source, in_range = source % g.wave_len, True
        valid = in_range & (source >= 0) & (source < g.wave_len)
        gather = g.wave_base + np.where(valid, source, li)
        enabled = (((row_mask >> (li // 16 % 4)) & 1) & ((bank_mask >> (li % 16 // 4)) & 1)).astype(bool)
        return gather, valid, enabled

    def masks(valid, enabled):
        """Per lane: takes the source, gets zero (bound_ctrl); None where no lane keeps `old` or gets
        zero (then the selects are skipped); shaped for values of rank vrank."""
        take = enabled & valid
        zero = enabled & ~valid if bound_ctrl else None
        return (None if take.all() else lane_mask_for(take, vrank),
                None if zero is None or not zero.any() else lane_mask_for(zero, vrank))

    def run(st, mask):
        env = st.env
        g = st.grid
        if key not in st.cache:
            gather, valid, enabled = tables(g)
            st.cache[key] = gather, valid, enabled, masks(valid, enabled)
        gather, valid, enabled, (take, zero) = st.cache[key]
        if mask is not None:  # reading a lane that does not execute is invalid too
            take, zero = masks(valid & mask[gather], enabled)
        result = to_lanes(env[src], g.lanes, vrank).take(gather, axis=0)
        if take is not None:
            result = np.where(take, result, env[old])
        env[out] = result if zero is None else np.where(zero, np.zeros((), result.dtype), result)

    return run


def compile_readlane(op: Operation, cc: KernelCompiler):
    value, lane = cc.operands(op)
    out = cc.result(op)
    vrank = vector_rank(op.result_types[0])
    what = cc.describe(op)

    def run(st, mask):
        env = st.env
        g = st.grid
        index = np.asarray(env[lane]).astype(np.int64)
        if np.any(index < 0) or np.any(index >= g.wave_len):
            raise InterpreterError(f"{what}: lane {index} is outside the wave of {g.wave_size} lanes")
        env[out] = gather_in_wave(g, env[value], index, True, vrank)

    return run


def compile_readfirstlane(op: Operation, cc: KernelCompiler):
    (value,) = cc.operands(op)
    out = cc.result(op)
    vrank = vector_rank(op.result_types[0])

    def run(st, mask):
        g = st.grid
        if mask is None:
            first = np.zeros_like(g.lane_in_wave)
        else:  # the lowest executing lane of each wave
            waves = int(g.wave_index[-1]) + 1
            first = np.full(waves, g.wave_size, dtype=np.int64)
            np.minimum.at(first, g.wave_index[mask], g.lane_in_wave[mask])
            first = np.minimum(first[g.wave_index], g.wave_len - 1)
        st.env[out] = gather_in_wave(g, st.env[value], first, True, vrank)

    return run


def compile_mbcnt(op: Operation, cc: KernelCompiler):
    """rocdl.mbcnt.lo / .hi: bits of the mask set below the lane, in the low / high 32 lanes, plus add."""
    bits, add = cc.operands(op)
    out = cc.result(op)
    high = op.name.endswith(".hi")

    def run(st, mask):
        env = st.env
        li = st.grid.lane_in_wave
        below = np.clip(li - 32 if high else li, 0, 32).astype(np.uint64)
        below_mask = (np.uint64(1) << below) - np.uint64(1)
        m = np.asarray(env[bits]).astype(np.uint32).astype(np.uint64)
        env[out] = (np.bitwise_count(m & below_mask).astype(np.int32) + env[add]).astype(np.int32)

    return run


HANDLERS = {
    "gpu.shuffle": compile_shuffle,
    "amdgpu.dpp": compile_dpp,
    "rocdl.readlane": compile_readlane,
    "rocdl.readfirstlane": compile_readfirstlane,
    "rocdl.mbcnt.lo": compile_mbcnt,
    "rocdl.mbcnt.hi": compile_mbcnt,
}
