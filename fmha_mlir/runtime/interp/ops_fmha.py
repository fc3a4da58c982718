"""The target-neutral kernel ops of docs/ir.md level 4, so kernel IR runs before target lowering too.
(fmha.atomic_add lives with the other atomics in ops_memory.)"""
from __future__ import annotations

import numpy as np

from ... import mask_geometry
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
        g = st.grid
        if width > g.wave_size:
            raise InterpreterError(f"{what}: width {width} exceeds the wave size {g.wave_size}")
        _require_whole_groups(g, mask, width, what)
        st.env[out] = butterfly_sum(g, st.env[src], width, vrank)

    return run


def _require_whole_groups(g, mask, width: int, what: str) -> None:
    """Every group of `width` lanes that reduces must exist and execute whole: the target lowerings read
    missing or inactive lanes as 0 (DPP with bound_ctrl) or as the reader's own value (shuffles), so a
    partial group has no defined sum, and the interpreter would otherwise read stale values."""
    partial = g.incomplete_groups(mask, width)
    if np.any(partial):
        lane = int(np.argmax(partial))
        raise InterpreterError(f"{what}: {g.describe(lane)} reduces over a group of {width} lanes that do not "
                               "all exist or execute (a divergent or partial-wave reduction)")


def compile_exp2(op: Operation, cc: KernelCompiler):
    (src,) = cc.operands(op)
    out = cc.result(op)

    def run(st, mask):
        st.env[out] = np.exp2(st.env[src])

    return run


def compile_masked_score(op: Operation, cc: KernelCompiler):
    """dot * scale_log2 where the pair is shown (mask_geometry.shown: visible under the mask and inside
    both sequences), -inf elsewhere."""
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
        scores = env[dot]
        # A scalar (uniform, or one value per lane) applies to every element of a vector score.
        q, k, sq, sk = (_per_element(env[v], scores.ndim) for v in (q_pos, k_pos, seqlen_q, seqlen_k))
        env[out] = np.where(mask_geometry.shown(mask_spec, q, k, sq, sk), scores * scale, minus_inf)

    return run


def _per_element(value, ndim: int):
    value = np.asarray(value)
    return value[:, None] if value.ndim == 1 and ndim == 2 else value


HANDLERS = {
    "fmha.wave_reduce": compile_wave_reduce,
    "fmha.exp2": compile_exp2,
    "fmha.masked_score": compile_masked_score,
}
