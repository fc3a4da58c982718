"""The target-neutral kernel ops of docs/ir.md level 4, so kernel IR runs before target lowering too.
(fmha.atomic_add lives with the other atomics in ops_memory.)"""
from __future__ import annotations

import numpy as np

from ...spec import MASK_KINDS, Mask
from .compiler import KernelCompiler
from .errors import InterpreterError
from .ops_crosslane import butterfly_sum
from .parser import Operation
from .types import vector_rank


def compile_wave_reduce(op: Operation, cc: KernelCompiler):
    (src,) = cc.operands(op)
    out = cc.result(op)
    kind = cc.attr(op, "kind")
    width = cc.int_attr(op, "width")
    if kind != "add":
        raise cc.error(op, f"wave_reduce kind {kind!r} is not supported (only 'add')")
    if width <= 0 or width & (width - 1):
        raise cc.error(op, f"wave_reduce width {width} is not a power of two")
    vrank = vector_rank(op.result_types[0])
    what = cc.describe(op)

    def run(st, mask):
        if width > st.grid.wave_size:
            raise InterpreterError(f"{what}: width {width} exceeds the wave size {st.grid.wave_size}")
        st.env[out] = butterfly_sum(st.grid, st.env[src], width, vrank)

    return run


def compile_exp2(op: Operation, cc: KernelCompiler):
    (src,) = cc.operands(op)
    out = cc.result(op)

    def run(st, mask):
        st.env[out] = np.exp2(st.env[src])

    return run


def compile_masked_score(op: Operation, cc: KernelCompiler):
    """dot * scale_log2 where the key is visible to the query (spec.Mask.visible), -inf where masked."""
    dot, q_pos, k_pos, seqlen_q, seqlen_k = cc.operands(op)
    out = cc.result(op)
    kind = cc.attr(op, "mask")
    if kind not in MASK_KINDS:
        raise cc.error(op, f"unknown mask {kind!r} (expected one of {', '.join(MASK_KINDS)})")
    mask_spec = Mask(kind, cc.int_attr(op, "window_left"), cc.int_attr(op, "window_right"))
    scale = np.float32(getattr(cc.attr(op, "scale_log2"), "value", np.nan))
    minus_inf = np.float32(-np.inf)

    def run(st, mask):
        env = st.env
        visible = mask_spec.visible(env[q_pos], env[k_pos], env[seqlen_q], env[seqlen_k])
        env[out] = np.where(visible, env[dot] * scale, minus_inf)

    return run


HANDLERS = {
    "fmha.wave_reduce": compile_wave_reduce,
    "fmha.exp2": compile_exp2,
    "fmha.masked_score": compile_masked_score,
}
